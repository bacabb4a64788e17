// EXPERIMENT (issue 4, not part of the package): Hopper's fp8 warpgroup MMA (wgmma,
// sm_90a only) for the skinny GEMM, where the package's kernel converts every fp8 weight
// byte to f16 for mma.sync and is slower than cuBLAS at M = 16 and 32.
//
// D^T = W X^T. The weight is wgmma's register operand, read straight from global memory
// with 16-byte loads; the activation rows are the shared-memory operand (no-swizzle K-major
// layout of 8-row x 16-byte core matrices: the descriptor's leading offset is the step
// between the two 16-byte K halves, its stride offset the step between 8-row groups),
// copied in once for the block's K range. Blocks split K and add fp32 partials with
// red.global.add into a zeroed fp32 output (no bf16 epilogue).
//
// One weight row a lane ("R1"): the A fragment of a lane is {row g, row g + 8, row g,
// row g + 8}; fed from two rows' loads, ptxas assembles it with moves right after the
// loads and every refill waits for its own load (the first kernel of this probe, commit
// 0abddf1). Here logical rows g and g + 8 are one physical row, each lane's one 16-byte load
// is the whole fragment, and B holds each activation row twice, permuted for words
// {0, 2} and for words {1, 3}: the row's dot product is D[g][m] + D[g + 8][8 NH + m].
// The fp8 accumulator keeps fewer bits than fp32, so sums move into fp32 registers
// (PROMOTE). The SS kernel (commit 4fdf00d) streamed the weight through shared memory
// instead, and was slower. Results and what they mean: BENCHMARKS.md, twelfth session.
//
// nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Xptxas -v benchmarks/wgmma_probe.cu -o /tmp/wgmma_probe
// /tmp/wgmma_probe            correctness at odd sizes, then timing at issue 4's shapes
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe_util.cuh"
#include "ptx.cuh"

namespace {

constexpr int kChunk = 64;  // K bytes a step of the loop: 4 lanes x 16 bytes a row

__device__ __forceinline__ uint4 ldg_stream(const void* p) {
  return inference_kernels::cuda::ld_stream16_ordered(static_cast<const uint8_t*>(p));
}

__device__ __forceinline__ uint64_t desc_of(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo & 0x3FFFF) >> 4) << 16) |
         (uint64_t((sbo & 0x3FFFF) >> 4) << 32);  // no swizzle, base offset 0
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

// d = A (64 x 32, registers) * B (32 x 16 NH, shared memory), the accumulator not read
// (scale-d 0): the R1 kernel's MMAs.

template <int ACC>
__device__ __forceinline__ void wgmma_fresh_1(float (&d)[8], uint4 a, uint64_t desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, %13, 1, 1;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "n"(ACC));
}
template <int ACC>
__device__ __forceinline__ void wgmma_fresh_2(float (&d)[16], uint4 a, uint64_t desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, %21, 1, 1;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "n"(ACC));
}
template <int ACC>
__device__ __forceinline__ void wgmma_fresh_3(float (&d)[24], uint4 a, uint64_t desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n48k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, {%24,%25,%26,%27}, %28, %29, 1, 1;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "n"(ACC));
}
template <int ACC>
__device__ __forceinline__ void wgmma_fresh_4(float (&d)[32], uint4 a, uint64_t desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, %37, 1, 1;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "n"(ACC));
}

template <int NH, int ACC>
__device__ __forceinline__ void wgmma_fresh(float (&d)[8 * NH], uint4 a, uint64_t desc) {
  if constexpr (NH == 1) wgmma_fresh_1<ACC>(d, a, desc);
  if constexpr (NH == 2) wgmma_fresh_2<ACC>(d, a, desc);
  if constexpr (NH == 3) wgmma_fresh_3<ACC>(d, a, desc);
  if constexpr (NH == 4) wgmma_fresh_4<ACC>(d, a, desc);
}

struct Args {
  const uint8_t* w;  // [N, K] e4m3
  const uint8_t* x;  // [M, K] e4m3
  float* out;        // [M, N] fp32, zeroed; partials are added
  int n, k, m;
  int cps;           // 64-byte chunks a split
  float scale;
};

using probe::fill;
using probe::reference;

// R1: one weight row a lane (8 a warp, 32 a warpgroup) and the A fragment straight from
// its 16-byte load, no register moves. Logical rows g and g + 8 of the MMA are both
// physical row g: row g takes the lane's words 0 and 2, row g + 8 words 1 and 3, and B
// holds two copies of each activation row, permuted for each (column m for row g,
// column 8 NH + m for row g + 8), so the row's dot product is D[g][m] + D[g + 8][8 NH + m]
// (the same thread holds both). Twice the MMA width a byte; at M <= 32 the tensor cores
// have it to spare. Each chunk's MMA starts from zero and is added to fp32 registers.
// PROMOTE: the MMAs of each U chunks start from zero and their sum is added to fp32
// registers once (else one accumulator over the whole K range).
// W1: keep one MMA in flight (wait for the one before, refill its slot) instead of
// waiting for each MMA before the next load.
template <int NH, int WGS, int U, bool PROMOTE, bool W1 = false>
__global__ void __launch_bounds__(128 * WGS) wgmma_r1(Args p) {
  extern __shared__ __align__(128) uint8_t xs[];  // [cpad chunks][2 halves][2 NH col groups][8 cols][16 B]
  const int nchunks = p.k / kChunk;
  const int c0 = blockIdx.y * p.cps;
  const int cn = min(p.cps, nchunks - c0);
  if (cn <= 0) return;
  const int cpad = (cn + U - 1) / U * U;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int r0 = blockIdx.x * 32 * WGS + warp * 8 + g;
  const uint8_t* pw = p.w + int64_t(min(r0, p.n - 1)) * p.k + int64_t(c0) * kChunk + 16 * t;
  uint4 w[U];
#pragma unroll
  for (int u = 0; u < U; ++u) w[u] = ldg_stream(pw + min(u, cn - 1) * kChunk);

  // word q of x's 16 bytes at 16t: q 0 -> (group 0, half 0), 1 -> (1, 0), 2 -> (0, 1), 3 -> (1, 1)
  const int words = 8 * NH * cpad * 4;
  for (int i = threadIdx.x; i < words; i += blockDim.x) {
    const int tt = i & 3, c = (i >> 2) % cpad, m = (i >> 2) / cpad;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (m < p.m && c < cn) v = *reinterpret_cast<const uint4*>(p.x + int64_t(m) * p.k + int64_t(c0 + c) * kChunk + 16 * tt);
    const uint32_t q[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int grp = j & 1, h = j >> 1, col = grp * 8 * NH + m;
      const int off = ((c * 2 + h) * (2 * NH) + (col >> 3)) * 128 + (col & 7) * 16 + 4 * tt;
      *reinterpret_cast<uint32_t*>(xs + off) = q[j];
    }
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(xs));
  float acc[8 * NH], part[8 * NH];
#pragma unroll
  for (int i = 0; i < 8 * NH; ++i) acc[i] = part[i] = 0.f;
  for (int cb = 0; cb < cpad; cb += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = cb + u;
      const uint64_t desc = desc_of(base + c * (2 * 2 * NH * 128), 2 * NH * 128, 128);
      wg_fence();
      if (PROMOTE && u == 0)
        wgmma_fresh<NH, 0>(part, w[u], desc);
      else
        wgmma_fresh<NH, 1>(PROMOTE ? part : acc, w[u], desc);
      wg_commit();
      if constexpr (W1) {
        if (u > 0) {
          asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
          w[u - 1] = ldg_stream(pw + min(c - 1 + U, cn - 1) * kChunk);
        }
      } else {
        wg_wait0();
        w[u] = ldg_stream(pw + min(c + U, cn - 1) * kChunk);
      }
    }
    if constexpr (W1) {
      wg_wait0();
      w[U - 1] = ldg_stream(pw + min(cb + 2 * U - 1, cn - 1) * kChunk);
    }
    if constexpr (PROMOTE) {
#pragma unroll
      for (int i = 0; i < 8 * NH; ++i) acc[i] += part[i];
    }
  }
#pragma unroll
  for (int j = 0; j < NH; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int m = 8 * j + 2 * t + e;
      if (m < p.m && r0 < p.n)
        atomicAdd(p.out + int64_t(m) * p.n + r0, (acc[4 * j + e] + acc[4 * (j + NH) + 2 + e]) * p.scale);
    }
  }
}

template <int NH, int WGS, int U, bool P, bool W1>
cudaError_t launch_r1(const Args& a, int splits, cudaStream_t st) {
  const int tiles = (a.n + 32 * WGS - 1) / (32 * WGS);
  const size_t smem = size_t((a.cps + U - 1) / U * U) * NH * 512;
  auto kern = wgmma_r1<NH, WGS, U, P, W1>;
  cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  kern<<<dim3(tiles, splits), 128 * WGS, smem, st>>>(a);
  return cudaGetLastError();
}

template <int NH, int WGS, int U, bool P, bool W1>
int resident_r1(int cps) {
  int b = 0;
  auto kern = wgmma_r1<NH, WGS, U, P, W1>;
  const size_t smem = size_t((cps + U - 1) / U * U) * NH * 512;
  if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kern, 128 * WGS, smem);
  return b;
}

using LaunchFn = cudaError_t (*)(const Args&, int, cudaStream_t);
using ResidentFn = int (*)(int);

// R1's launcher and residency for n-tiles nt = ceil(M / 8) (1-4), one table per variant.
struct R1Fns {
  LaunchFn launch;
  ResidentFn res;
};
template <int WGS, int U, bool P, bool W1 = false>
R1Fns r1_fns(int nt) {
  static constexpr R1Fns fns[4] = {{launch_r1<1, WGS, U, P, W1>, resident_r1<1, WGS, U, P, W1>},
                                   {launch_r1<2, WGS, U, P, W1>, resident_r1<2, WGS, U, P, W1>},
                                   {launch_r1<3, WGS, U, P, W1>, resident_r1<3, WGS, U, P, W1>},
                                   {launch_r1<4, WGS, U, P, W1>, resident_r1<4, WGS, U, P, W1>}};
  return fns[std::clamp(nt, 1, 4) - 1];
}

struct Variant {
  const char* name;
  int rows;  // weight rows a block
  R1Fns (*fns)(int);
  LaunchFn launch(int nt) const { return fns(nt).launch; }
  ResidentFn res(int nt) const { return fns(nt).res; }
};
const Variant kVariants[] = {
    // s12's runs 1-3 also had the first kernel (at commit 0abddf1 / 879277f) and r1 u8 (no
    // promotion); run 4 r1 u8p and the W1 variants (no better); runs 5-6 the SS kernel
    // (the weight through a cp.async ring; at commit 4fdf00d)
    {"r1 u4p", 32, r1_fns<1, 4, true>},
    {"r1 wgs2 u8p", 64, r1_fns<2, 8, true>},
};

// max |ours - ref| / max |ref| over the output
double check(const Variant& v, int n, int k, int m, int splits) {
  return probe::check_product(n, k, m, [&](const uint8_t* w, const uint8_t* x, float* out) {
    const int nchunks = k / kChunk;
    Args a{w, x, out, n, k, m, (nchunks + splits - 1) / splits, 0.5f};
    return v.launch((m + 7) / 8)(a, (nchunks + a.cps - 1) / a.cps, 0);
  });
}

// median us a call over graph replays of `copies` launches on rotated weights
float time_it(const Variant& v, const probe::Operands& o, int m, int splits) {
  const int n = o.n, k = o.k;
  const int nchunks = k / kChunk;
  Args a{o.w, o.x, o.out, n, k, m, (nchunks + splits - 1) / splits, 1.f};
  const int real_splits = (nchunks + a.cps - 1) / a.cps;
  auto fn = v.launch((m + 7) / 8);
  return probe::graph_time_us(o.copies, [&](int i, cudaStream_t st) {
    a.w = o.w + size_t(i) * n * k;
    return fn(a, real_splits, st);
  });
}

}  // namespace

int main() {
  const int sms = probe::print_device();

  // Correctness: odd N (tail rows clamped, not stored), K ranges that do not divide, every
  // n-tile count, both readings of the descriptor's two offsets.
  // The first run (s12, wgmma_probe) found LBO = the K-direction step right (the other
  // reading faults) and, without promotion, errors of 3e-4 to 2e-3 of max |ref|.
  std::printf("\ncorrectness (max |ours - fp64 ref| / max |ref|; 'ok' below 1e-5, 'bf16' below 2e-3):\n");
  for (const Variant& v : kVariants)
    for (int m : {1, 5, 8, 13, 16, 24, 32})
      for (auto nk : {std::pair<int, int>{1000, 4096}, {37, 6656}, {2304, 1024}, {2304, 16384}}) {
        const double e = check(v, nk.first, nk.second, m, 5);
        std::printf("  %-8s M %2d N %5d K %5d: %.2e %s\n", v.name, m, nk.first, nk.second, e,
                    e < 1e-5 ? "ok" : e < 2e-3 ? "bf16" : "WRONG");
      }

  std::printf("\ntiming (us a call, median of graph replays, weights rotated over >= 8 copies and >= 400 MB):\n");
  std::printf("%-8s %6s %6s %3s %7s %6s %9s %9s %6s\n", "variant", "N", "K", "M", "splits", "ctas", "res/SM",
              "us", "GB/s");
  for (auto nk : probe::timed_shapes()) {
    const int n = nk.first, k = nk.second;
    const size_t wbytes = size_t(n) * k;
    const probe::Operands ops(n, k);
    for (int m : {1, 8, 16, 32}) {
      float best = 1e30f;
      const char* best_name = "";
      int best_s = 0;
      for (const Variant& v : kVariants) {
        const int tiles = (n + v.rows - 1) / v.rows;
        const int nchunks = k / kChunk;
        int last = -1;
        // PROBE_SPLITS=a,b,..: those split counts (e.g. at most 8, a portable cluster);
        // else the splits that fill half a wave to 4 waves of resident blocks
        std::vector<int> fixed;
        if (const char* e = std::getenv("PROBE_SPLITS"))
          for (const char* q = e; *q; ++q)
            if (q == e || q[-1] == ',') fixed.push_back(std::atoi(q));
        const std::vector<int> hw = {1, 2, 4, 6, 8};
        for (size_t i = 0; i < (fixed.empty() ? hw.size() : fixed.size()); ++i) {
          int s = 1;
          if (!fixed.empty()) {
            s = std::min(fixed[i], nchunks);
          } else {
            // splits so that the grid fills hw[i] / 2 x the resident blocks (residency at
            // that split's shared memory)
            for (; s < nchunks; ++s) {
              const int cps = (nchunks + s - 1) / s;
              const int res = v.res((m + 7) / 8)(cps);  // 0: X's K range does not fit
              if (res > 0 && 2 * int64_t(tiles) * s >= int64_t(hw[i]) * res * sms) break;
            }
          }
          const int cps = (nchunks + s - 1) / s;
          s = (nchunks + cps - 1) / cps;
          if (s == last) continue;
          last = s;
          const int res = v.res((m + 7) / 8)(cps);
          if (res == 0) continue;
          const float us = time_it(v, ops, m, s);
          std::printf("%-8s %6d %6d %3d %7d %6d %9d %9.2f %6.0f\n", v.name, n, k, m, s, tiles * s, res, us,
                      wbytes / (us * 1e3));
          if (us < best) best = us, best_name = v.name, best_s = s;
        }
      }
      std::printf("BEST %d x %d M %d: %.2f us (%s, %d splits)\n", n, k, m, best, best_name, best_s);
    }
  }
  return 0;
}
