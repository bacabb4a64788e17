// EXPERIMENT (issue 6), not part of the package: does the way the tiled Q4_K gemv divides
// its weight bytes hold it above a plain read? A plain read of the 33 MB at 14336 x 4096
// takes 9.03 us (read_floor.py: 8064 programs of 4 KB, each loaded at once); the landed
// gemv's loads alone, a CTA a 16-row tile whose warps stream K one block after another
// with the next in flight, 10.4 (s15d). Goal: <= 10.4 with the arithmetic.
//
// Read-only kernels on random bytes in the tiled layout (a tile block: 2304 contiguous
// bytes, a lane's five 16-byte loads as q4k.cu reads them), XORed, one word a CTA:
//   plain   : CTAs of 128 threads, 4 KB each, every load issued at once (read_floor's best);
//   stream  : a CTA a tile, W warps splitting K, each walking its blocks G at a time with
//             the next G in flight (the landed shape at G = 1);
//   oneshot : S CTAs a tile, W warps each, every warp's B blocks loaded at once; no
//             reduction between the S CTAs (what a split over CTAs could reach at best);
//   cluster : oneshot with the S CTAs of a tile in a cluster, rank 0 reading the others'
//             words through distributed shared memory (what the reduction costs);
//   ticket  : the S CTAs of a tile without a cluster: each writes its word to a global
//             workspace, and the last to take a ticket (atomicInc wrapping at S, so the
//             counters return to zero by themselves) reads the S words in rank order.
// These kernels need 28-106 registers; the gemv's take 128, 16 warps an SM. Each variant
// runs twice: as it is, and held to 16 warps an SM by dynamic shared memory ("@16w").
// Build and run: scripts/h200_session.sh, mode q4k_read.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "probe_util.cuh"
#include "ptx.cuh"

namespace cg = cooperative_groups;

constexpr int kBlockBytes = 2304;  // a tile block: 16 rows x 144 bytes

struct Args {
  const uint8_t* q;  // [tiles][nb][2304]
  uint32_t* out;
  uint32_t* work;     // ticket: [tiles * S] words
  unsigned* tickets;  // ticket: [tiles], zero at allocation
  int nb;  // blocks a tile row (k / 256)
  int s;   // CTAs a tile
};

using inference_kernels::cuda::after_loads;
constexpr auto ld16 = inference_kernels::cuda::ld_stream16_ordered;

__device__ __forceinline__ uint4 ld16ca(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.ca.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

struct Blk {
  uint4 c[5];
};

__device__ __forceinline__ void load(Blk& b, const uint8_t* blk, int lane) {
#pragma unroll
  for (int c = 0; c < 4; ++c) b.c[c] = ld16(blk + 512 * c + 16 * lane);
  b.c[4] = ld16(blk + 2048 + 16 * (lane & 15));
}

__device__ __forceinline__ uint32_t fold(const Blk& b) {
  uint32_t a = 0;
#pragma unroll
  for (int c = 0; c < 5; ++c) a ^= b.c[c].x ^ b.c[c].y ^ b.c[c].z ^ b.c[c].w;
  return a;
}

// The warps' words met in shared memory; thread 0 returns the CTA's.
__device__ __forceinline__ uint32_t cta_xor(uint32_t acc, uint32_t* sm) {
#pragma unroll
  for (int o = 16; o; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0) sm[threadIdx.x / 32] = acc;
  __syncthreads();
  uint32_t r = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < int(blockDim.x / 32); ++w) r ^= sm[w];
  return r;
}

// G blocks at a time; PF: the next G loaded before the current are folded.
template <int G, bool PF, bool CLUSTER, bool TICKET = false>
__global__ void __launch_bounds__(512) tiles_read(Args a) {
  __shared__ uint32_t sm[17];
  const int warps = blockDim.x / 32, w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tile = blockIdx.x / a.s, s = blockIdx.x % a.s;
  const int per = a.nb / (a.s * warps);
  const uint8_t* p = a.q + (int64_t(tile) * a.nb + (s * warps + w) * per) * kBlockBytes;
  uint32_t acc = 0;
  Blk cur[G];
#pragma unroll
  for (int i = 0; i < G; ++i) load(cur[i], p + i * kBlockBytes, lane);
  for (int j = G; j < per; j += G) {
    if constexpr (PF) {
      Blk nxt[G];
#pragma unroll
      for (int i = 0; i < G; ++i) load(nxt[i], p + (j + i) * kBlockBytes, lane);
#pragma unroll
      for (int i = 0; i < G; ++i) acc ^= fold(cur[i]), cur[i] = nxt[i];
    } else {
#pragma unroll
      for (int i = 0; i < G; ++i) acc ^= fold(cur[i]);
#pragma unroll
      for (int i = 0; i < G; ++i) load(cur[i], p + (j + i) * kBlockBytes, lane);
    }
  }
#pragma unroll
  for (int i = 0; i < G; ++i) acc ^= fold(cur[i]);
  uint32_t r = cta_xor(acc, sm);
  if constexpr (CLUSTER) {
    cg::cluster_group cl = cg::this_cluster();
    if (threadIdx.x == 0) sm[16] = r;
    cl.sync();
    if (cl.block_rank() == 0 && threadIdx.x == 0)
      for (unsigned i = 1; i < cl.num_blocks(); ++i) r ^= *cl.map_shared_rank(&sm[16], i);
    cl.sync();  // the others stay until rank 0 has read them
    if (cl.block_rank() == 0 && threadIdx.x == 0) a.out[blockIdx.x / a.s] = r;
  } else if (TICKET) {
    if (threadIdx.x == 0) {
      const int tile = blockIdx.x / a.s;
      a.work[blockIdx.x] = r;
      __threadfence();
      if (atomicInc(&a.tickets[tile], unsigned(a.s - 1)) == unsigned(a.s - 1)) {
        __threadfence();
        uint32_t t = 0;
        for (int i = 0; i < a.s; ++i) t ^= __ldcg(&a.work[tile * a.s + i]);
        a.out[tile] = t;
      }
    }
  } else if (threadIdx.x == 0) {
    a.out[blockIdx.x] = r;
  }
}

// The FP8 GEMM at M = 1 with no split of K between blocks: a block takes R whole rows of
// the [N, K] weight (T threads x V 16-byte vectors a row, all loaded at once) with the
// matching 16 bytes of x (one activation row, through L1), and reduces in shared memory.
template <int R, int V>
__global__ void __launch_bounds__(256, 1) rows_read(const uint8_t* w, const uint8_t* x, uint32_t* out, int k) {
  __shared__ uint32_t sm[8];
  const uint8_t* row = w + int64_t(blockIdx.x) * R * k;
  uint4 a[R][V], b[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int off = 16 * (threadIdx.x + j * blockDim.x);
#pragma unroll
    for (int r = 0; r < R; ++r) a[r][j] = ld16(row + int64_t(r) * k + off);
    b[j] = ld16ca(x + off);
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    after_loads(b[j]);
#pragma unroll
    for (int r = 0; r < R; ++r) after_loads(a[r][j]);
  }
  uint32_t acc = 0;
#pragma unroll
  for (int j = 0; j < V; ++j)
#pragma unroll
    for (int r = 0; r < R; ++r)
      acc ^= (a[r][j].x + b[j].x) ^ (a[r][j].y + b[j].y) ^ (a[r][j].z + b[j].z) ^ (a[r][j].w + b[j].w);
  const uint32_t t = cta_xor(acc, sm);
  if (threadIdx.x == 0) out[blockIdx.x] = t;
}

// read_floor.py's best at this size: 128 threads, two 16-byte loads each, 4 KB a CTA.
__global__ void __launch_bounds__(128) plain_read(const uint8_t* q, uint32_t* out) {
  __shared__ uint32_t sm[4];
  const uint8_t* p = q + int64_t(blockIdx.x) * 4096 + 16 * threadIdx.x;
  const uint4 u = ld16(p), v = ld16(p + 2048);
  const uint32_t r = cta_xor(u.x ^ u.y ^ u.z ^ u.w ^ v.x ^ v.y ^ v.z ^ v.w, sm);
  if (threadIdx.x == 0) out[blockIdx.x] = r;
}

using Kernel = void (*)(Args);

template <int G, bool PF, bool CLUSTER, bool TICKET = false>
Kernel pick() {
  return tiles_read<G, PF, CLUSTER, TICKET>;
}

Kernel kernel_for(int g, bool pf, bool cluster, bool ticket = false) {
  if (ticket) return g == 1 ? pick<1, true, false, true>() : g == 2 ? pick<2, true, false, true>() : pick<4, false, false, true>();
  if (cluster && pf) return g == 1 ? pick<1, true, true>() : pick<2, true, true>();
  if (cluster) return g == 1 ? pick<1, false, true>() : g == 2 ? pick<2, false, true>() : pick<4, false, true>();
  if (pf) return g == 1 ? pick<1, true, false>() : pick<2, true, false>();
  return g == 1 ? pick<1, false, false>() : g == 2 ? pick<2, false, false>() : pick<4, false, false>();
}

int main() {
  probe::print_device();
  // Last, the FP8 GEMM's 2304 x 16384 as its TMA kernel divides it (37 MB; 36 tiles of 64
  // rows, K split over the blocks of a cluster): 448 chunks of 2304 bytes a tile, each
  // warp streaming its share, with (cluster) and without (stream Sn) the clusters.
  struct Case {
    int n, k, tiles, nb;
    bool gemm;
  };
  for (Case cs : std::vector<Case>{{14336, 4096, 896, 16, false}, {4096, 14336, 256, 56, false},
                                   {4096, 4096, 256, 16, false}, {2304, 16384, 36, 448, true}}) {
    const int n = cs.n, k = cs.k, tiles = cs.tiles, nb = cs.nb;
    if (std::getenv("PROBE_GEMM_ONLY") && !cs.gemm) continue;
    const size_t bytes = size_t(tiles) * nb * kBlockBytes;
    const int copies = std::max<int>(8, int((400ull << 20) / bytes) + 1);
    uint8_t* q;
    uint32_t* out;
    CK(cudaMalloc(&q, bytes * copies));
    CK(cudaMalloc(&out, (bytes / 4096 + 1) * 4));
    uint32_t* work;
    unsigned* tickets;
    CK(cudaMalloc(&work, size_t(tiles) * 16 * 4));
    CK(cudaMalloc(&tickets, size_t(tiles) * 4));
    CK(cudaMemset(tickets, 0, size_t(tiles) * 4));
    probe::fill<<<1024, 256>>>(q, int64_t(bytes) * copies, 5u);
    CK(cudaDeviceSynchronize());
    std::printf("\n%d x %d%s: %.2f MB, %d copies\n", n, k, cs.gemm ? " (fp8 GEMM: 36 tiles x 448 chunks)" : "",
                bytes / 1e6, copies);
    const float plain = probe::graph_time_us(copies, [&](int i, cudaStream_t st) {
      plain_read<<<unsigned(bytes / 4096), 128, 0, st>>>(q + i * bytes, out);
      return cudaGetLastError();
    });
    std::printf("  %-40s %7.2f us  %5.2f TB/s\n", "plain 4 KB x 128 threads", plain, bytes / plain / 1e6);
    struct V {
      std::string kind;
      int s, w, g;
      bool pf, cap = false;
    };
    std::vector<V> vs;
    for (int w : {2, 4, 8})
      for (int g : {1, 2})
        if (!cs.gemm && nb % (w * g) == 0) vs.push_back({"stream", 1, w, g, true});
    for (int sp : {1, 2, 4, 8})
      for (int w : {4, 8})
        for (int g : {1, 2})
          if (cs.gemm && (nb / (sp * w)) % g == 0) {
            vs.push_back({"stream", sp, w, g, true});
            if (sp > 1) vs.push_back({"cluster", sp, w, g, true}), vs.push_back({"ticket", sp, w, g, true});
          }
    for (int w : {1, 2, 4, 8, 16})
      for (int g : {1, 2, 4})
        if (!cs.gemm && nb % (w * g) == 0 && nb / (w * g) <= 16) {
          const int s = nb / (w * g);
          vs.push_back({"oneshot", s, w, g, false});
          if (s > 1 && s <= 8) vs.push_back({"cluster", s, w, g, false});
          if (s > 1) vs.push_back({"ticket", s, w, g, false});
        }
    for (size_t i = 0, e = vs.size(); i < e; ++i) vs.push_back(vs[i]), vs.back().cap = true;
    for (const V& v : vs) {
      const bool cluster = v.kind == "cluster";
      Kernel kern = kernel_for(v.g, v.pf, cluster, v.kind == "ticket");
      cudaLaunchConfig_t cfg = {};
      cudaLaunchAttribute attr[1];
      cfg.gridDim = dim3(unsigned(tiles * v.s));
      cfg.blockDim = dim3(unsigned(32 * v.w));
      if (cluster) {
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = unsigned(v.s), attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr, cfg.numAttrs = 1;
      }
      if (v.cap) {  // 16 / W CTAs an SM, each taking its share of the 228 KB
        const int ctas = std::max(1, 16 / v.w);
        cfg.dynamicSmemBytes = size_t(233472 / ctas - 1024 - 256);
        CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(cfg.dynamicSmemBytes)));
      }
      auto launch = [&](int i, cudaStream_t st) {
        cfg.stream = st;
        return cudaLaunchKernelEx(&cfg, kern, Args{q + i * bytes, out, work, tickets, nb, v.s});
      };
      if (launch(0, nullptr) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        std::printf("  %-8s S%-2d W%-2d G%d%s: launch failed (%s)\n", v.kind.c_str(), v.s, v.w, v.g,
                    v.cap ? " @16w" : "", cudaGetErrorString(cudaGetLastError()));
        continue;
      }
      const float t = probe::graph_time_us(copies, launch);
      char name[64];
      std::snprintf(name, sizeof name, "%s S%d W%d G%d%s (%d blocks a warp)", v.kind.c_str(), v.s, v.w, v.g,
                    v.cap ? " @16w" : "", nb / (v.s * v.w));
      std::printf("  %-40s %7.2f us  %5.2f TB/s  %.2fx plain\n", name, t, bytes / t / 1e6, t / plain);
    }
    if (cs.gemm) {  // [2304, 16384] fp8 read as rows (bytes: 36 x 448 x 2304 = 2268 rows of 16384)
      uint8_t* xa;
      CK(cudaMalloc(&xa, size_t(k)));
      CK(cudaMemset(xa, 1, size_t(k)));
      const int rows = int(bytes / size_t(k));
      auto rows_variant = [&](const char* name, auto kern, int r, int threads) {
        const float t = probe::graph_time_us(copies, [&](int i, cudaStream_t st) {
          kern<<<unsigned(rows / r), unsigned(threads), 0, st>>>(q + i * bytes, xa, out, k);
          return cudaGetLastError();
        });
        std::printf("  %-40s %7.2f us  %5.2f TB/s  %.2fx plain\n", name, t, bytes / t / 1e6, t / plain);
      };
      rows_variant("rows R1 x 256 threads x 4 vectors", rows_read<1, 4>, 1, 256);
      rows_variant("rows R1 x 128 threads x 8 vectors", rows_read<1, 8>, 1, 128);
      rows_variant("rows R2 x 256 threads x 4 vectors", rows_read<2, 4>, 2, 256);
      rows_variant("rows R2 x 128 threads x 8 vectors", rows_read<2, 8>, 2, 128);
      rows_variant("rows R4 x 256 threads x 4 vectors", rows_read<4, 4>, 4, 256);
      cudaFree(xa);
    }
    cudaFree(q), cudaFree(out), cudaFree(work), cudaFree(tickets);
  }
  return 0;
}
