// EXPERIMENT (issue 6), not part of the package: is the tiled Q4_K gemv at m = 1 held by
// its unpacking and MMAs, and would integer MMAs on int8 activations (llama.cpp's q8_1
// idea, on tensor cores) take it to the goal (<= 10.4 us at 14336 x 4096)?
//
// One skeleton, four inner loops, on the package's tiled Q4_K layout (ggml_blocks.h):
// a CTA a 16-row tile, W warps splitting K, each warp loading the next tile block into
// registers before working on the current one, the scale table traded through shared
// memory as q4k.cu does, the warps' sums met in shared memory.
//   f16  : the landed arithmetic (q4k.cu): levels as f16 pairs (magic 1024), mma.m16n8k16,
//          a second MMA of ones for the activation sums; x fp16 from global (L1).
//   q8   : levels as int8 (two masks a word), mma.m16n8k32.s8 against x quantised to int8
//          per 32 (scale dx = max|x| / 127, sums dx * sum q given): a quarter of the MMAs,
//          no activation-sum MMA, half the unpacking.
//   q8x2 : q8 with x split in two int8 parts (x / dx = h + l / 254): twice q8's MMAs,
//          about fp16's precision.
//   read : the same loads, XORed together (the skeleton's floor).
// x is quantised beforehand (host) for q8 and q8x2: the probe asks what the loop costs.
// Build and run: see scripts/h200_session.sh, mode q4k_imma.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ggml_blocks.h"
#include "ptx.cuh"

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

using inference_kernels::cuda::ld_stream16;
using inference_kernels::cuda::mma_m16n8k16;
using inference_kernels::ggml::kQ4KTileBytes;
using inference_kernels::ggml::kQ4KTileHeads;

enum Kind { kF16 = 0, kQ8 = 1, kQ8x2 = 2, kRead = 3 };
constexpr int kStride = 20;  // floats a row of the scale table (16 used)

struct Args {
  const uint8_t* q;     // tiled weight [n / 16][k / 256][2304]
  const __half* x;      // fp16 x [k]
  const int8_t* xq;     // q8: [k]; q8x2: [2][k] (h, then l)
  const float2* xds;    // [k / 32]: (dx, dx * sum q) (q8x2: dx / 254 and dx * sum(h + l / 254))
  float* out;           // [n]
  int n, k;
};

__device__ __forceinline__ float byte_to_float(uint32_t w, int i) {
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u | i)) - 8388608.0f;
}
__device__ __forceinline__ uint32_t level_pair(uint32_t q, int i) {
  return __byte_perm(q, 0x64u, i ? 0x4342u : 0x4140u);
}

struct Block {
  uint4 c[4];
  uint4 head;
};

__device__ __forceinline__ Block load_block(const uint8_t* at, const uint8_t* head) {
  Block b;
#pragma unroll
  for (int c = 0; c < 4; ++c) b.c[c] = ld_stream16(at + 512 * c);
  b.head = ld_stream16(head);
  return b;
}

// Lane pair half h of row lane / 2: sub-blocks 4h..4h+3, whose levels the MMAs take as
// they lie (high nibbles as 16 q: the factors of odd sub-blocks are divided by 16).
// F16: ds and dc = 1024 ds + dm a sub-block. Q8 (xd: this block's (dx, X) a sub-block):
// ds dx a sub-block, and the half row's min term sum dm X at column 16 + h.
template <bool F16>
__device__ __forceinline__ void scales(int lane, const uint4& head, float* table, const float2* xd) {
  const uint32_t s0 = head.y, s1 = head.z, s2 = head.w;
  const bool h = lane & 1;
  const uint32_t scw = h ? (s2 & 0x0F0F0F0Fu) | ((s0 >> 2) & 0x30303030u) : s0 & 0x3F3F3F3Fu;
  const uint32_t mnw = h ? ((s2 >> 4) & 0x0F0F0F0Fu) | ((s1 >> 2) & 0x30303030u) : s1 & 0x3F3F3F3Fu;
  const float d = __half2float(__ushort_as_half(uint16_t(head.x))), dmin = __half2float(__ushort_as_half(uint16_t(head.x >> 16)));
  const float d_hi = d * 0.0625f;
  float* row = table + (lane >> 1) * kStride + 4 * h;
  if constexpr (F16) {
    float ds[4], dc[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      ds[i] = (i & 1 ? d_hi : d) * byte_to_float(scw, i);
      dc[i] = fmaf(1024.0f, ds[i], dmin * byte_to_float(mnw, i));
    }
    *reinterpret_cast<float4*>(row) = make_float4(ds[0], ds[1], ds[2], ds[3]);
    *reinterpret_cast<float4*>(row + 8) = make_float4(dc[0], dc[1], dc[2], dc[3]);
  } else {
    const float4 xa = __ldg(reinterpret_cast<const float4*>(xd + 4 * h));
    const float4 xb = __ldg(reinterpret_cast<const float4*>(xd + 4 * h + 2));
    const float dx[4] = {xa.x, xa.z, xb.x, xb.z}, X[4] = {xa.y, xa.w, xb.y, xb.w};
    float ds[4], m = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      ds[i] = (i & 1 ? d_hi : d) * byte_to_float(scw, i) * dx[i];
      m = fmaf(dmin * byte_to_float(mnw, i), X[i], m);
    }
    *reinterpret_cast<float4*>(row) = make_float4(ds[0], ds[1], ds[2], ds[3]);
    table[(lane >> 1) * kStride + 16 + h] = m;
  }
}

__device__ __forceinline__ void immau(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                      uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int K_>
__global__ void __launch_bounds__(256) gemv(Args a) {
  constexpr Kind K = Kind(K_);
  __shared__ float tables[8][16 * kStride];
  __shared__ float part[8][16];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int nb = a.k / 256;
  const int b0 = warp * nb / W, b1 = (warp + 1) * nb / W;
  const uint8_t* tile = a.q + int64_t(blockIdx.x) * nb * kQ4KTileBytes;
  const uint8_t* at = tile + 16 * lane;
  const uint8_t* head = tile + kQ4KTileHeads + 16 * (lane >> 1);
  float* table = tables[warp];
  float acc0 = 0.f, acc2 = 0.f;
  uint32_t xr = 0;
  Block cur = load_block(at + int64_t(b0) * kQ4KTileBytes, head + int64_t(b0) * kQ4KTileBytes);
  for (int b = b0; b < b1; ++b) {
    const int bn = min(b + 1, b1 - 1);
    const Block nxt = load_block(at + int64_t(bn) * kQ4KTileBytes, head + int64_t(bn) * kQ4KTileBytes);
    if constexpr (K == kRead) {
#pragma unroll
      for (int c = 0; c < 4; ++c) xr ^= cur.c[c].x ^ cur.c[c].y ^ cur.c[c].z ^ cur.c[c].w;
      xr ^= cur.head.x ^ cur.head.w;
    } else {
      scales<K == kF16>(lane, cur.head, table, a.xds + 8 * b);
      __syncwarp();
      const float* tg = table + g * kStride;
      const float* th = table + (g + 8) * kStride;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const uint32_t w[4] = {cur.c[c].x, cur.c[c].y, cur.c[c].z, cur.c[c].w};  // g: x, y; g + 8: z, w
        const float2 dsg = *reinterpret_cast<const float2*>(tg + 2 * c);
        const float2 dsh = *reinterpret_cast<const float2*>(th + 2 * c);
        const int xo = b * 256 + 64 * c + 8 * t;  // sub-block 2c at xo, 2c + 1 at xo + 32
        if constexpr (K == kF16) {
          const uint4 xl = __ldg(reinterpret_cast<const uint4*>(a.x + xo));
          const uint4 xh = __ldg(reinterpret_cast<const uint4*>(a.x + xo + 32));
          float sl[4] = {}, sh[4] = {}, xsl[4] = {}, xsh[4] = {};
          constexpr uint32_t one = 0x3C003C00u;
          const float2 dcg = *reinterpret_cast<const float2*>(tg + 8 + 2 * c);
          const float2 dch = *reinterpret_cast<const float2*>(th + 8 + 2 * c);
#pragma unroll
          for (int v = 0; v < 2; ++v) {
            const uint32_t lg = w[v] & 0x0F0F0F0Fu, hg = w[v] & 0xF0F0F0F0u;
            const uint32_t lh = w[2 + v] & 0x0F0F0F0Fu, hh = w[2 + v] & 0xF0F0F0F0u;
            const uint32_t bl0 = v ? xl.z : xl.x, bl1 = v ? xl.w : xl.y;
            const uint32_t bh0 = v ? xh.z : xh.x, bh1 = v ? xh.w : xh.y;
            mma_m16n8k16<false>(sl, level_pair(lg, 0), level_pair(lh, 0), level_pair(lg, 1), level_pair(lh, 1), bl0, bl1);
            mma_m16n8k16<false>(xsl, one, one, one, one, bl0, bl1);
            mma_m16n8k16<false>(sh, level_pair(hg, 0), level_pair(hh, 0), level_pair(hg, 1), level_pair(hh, 1), bh0, bh1);
            mma_m16n8k16<false>(xsh, one, one, one, one, bh0, bh1);
          }
          acc0 = fmaf(dsg.x, sl[0], fmaf(-dcg.x, xsl[0], acc0));
          acc2 = fmaf(dsh.x, sl[2], fmaf(-dch.x, xsl[2], acc2));
          acc0 = fmaf(dsg.y, sh[0], fmaf(-dcg.y, xsh[0], acc0));
          acc2 = fmaf(dsh.y, sh[2], fmaf(-dch.y, xsh[2], acc2));
        } else {
          // A (u8): a0 row g k 4t.. (bytes 8t..8t+3), a2 row g k 16 + 4t.. (bytes 8t + 4..), a1/a3
          // row g + 8; high nibbles as 16 q.
          const uint32_t lg0 = w[0] & 0x0F0F0F0Fu, lg1 = w[1] & 0x0F0F0F0Fu;
          const uint32_t lh0 = w[2] & 0x0F0F0F0Fu, lh1 = w[3] & 0x0F0F0F0Fu;
          const uint32_t hg0 = w[0] & 0xF0F0F0F0u, hg1 = w[1] & 0xF0F0F0F0u;
          const uint32_t hh0 = w[2] & 0xF0F0F0F0u, hh1 = w[3] & 0xF0F0F0F0u;
          int sl[4] = {}, sh[4] = {};
          const uint2 ql = __ldg(reinterpret_cast<const uint2*>(a.xq + xo));
          const uint2 qh = __ldg(reinterpret_cast<const uint2*>(a.xq + xo + 32));
          immau(sl, lg0, lh0, lg1, lh1, ql.x, ql.y);
          immau(sh, hg0, hh0, hg1, hh1, qh.x, qh.y);
          int s_l0 = sl[0], s_l2 = sl[2], s_h0 = sh[0], s_h2 = sh[2];
          if constexpr (K == kQ8x2) {
            int ll[4] = {}, lh[4] = {};
            const uint2 pl = __ldg(reinterpret_cast<const uint2*>(a.xq + a.k + xo));
            const uint2 ph = __ldg(reinterpret_cast<const uint2*>(a.xq + a.k + xo + 32));
            immau(ll, lg0, lh0, lg1, lh1, pl.x, pl.y);
            immau(lh, hg0, hh0, hg1, hh1, ph.x, ph.y);
            s_l0 = s_l0 * 254 + ll[0], s_l2 = s_l2 * 254 + ll[2];
            s_h0 = s_h0 * 254 + lh[0], s_h2 = s_h2 * 254 + lh[2];
          }
          acc0 = fmaf(dsg.x, float(s_l0), acc0);
          acc2 = fmaf(dsh.x, float(s_l2), acc2);
          acc0 = fmaf(dsg.y, float(s_h0), acc0);
          acc2 = fmaf(dsh.y, float(s_h2), acc2);
        }
      }
      if constexpr (K != kF16) {
        const float2 mg = *reinterpret_cast<const float2*>(tg + 16), mh = *reinterpret_cast<const float2*>(th + 16);
        acc0 -= mg.x + mg.y;
        acc2 -= mh.x + mh.y;
      }
      __syncwarp();
    }
    cur = nxt;
  }
  if constexpr (K == kRead) acc0 = __uint_as_float(xr & 0x807FFFFFu);  // keeps the loads
  if (t == 0) {
    part[warp][g] = acc0;
    part[warp][g + 8] = acc2;
  }
  __syncthreads();
  if (threadIdx.x < 16) {
    float s = 0.f;
    for (int w = 0; w < W; ++w) s += part[w][threadIdx.x];
    const int row = blockIdx.x * 16 + threadIdx.x;
    if (row < a.n) a.out[row] = s;
  }
}

// ---- host --------------------------------------------------------------------------------

static uint32_t hash(uint64_t i, uint32_t seed) {
  uint32_t h = uint32_t(i) * 2654435761u ^ seed ^ uint32_t(i >> 32) * 40503u;
  h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
  return h;
}

static float h2f(uint16_t b) {
  __half h;
  std::memcpy(&h, &b, 2);
  return __half2float(h);
}
static uint16_t f2h(float f) {
  const __half h = __float2half_rn(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

// A random tiled weight: random qs and scale bytes, d and dmin in [2^-9, 2^-7].
static void fill_tiles(std::vector<uint8_t>& q, int n, int k, uint32_t seed) {
  const int nb = k / 256;
  q.resize(size_t(n / 16) * nb * kQ4KTileBytes);
  for (size_t i = 0; i < q.size(); ++i) q[i] = uint8_t(hash(i, seed));
  for (size_t tb = 0; tb < size_t(n / 16) * nb; ++tb)
    for (int r = 0; r < 16; ++r) {
      uint8_t* h = q.data() + tb * kQ4KTileBytes + kQ4KTileHeads + 16 * r;
      const uint32_t v = hash(tb * 16 + r, seed ^ 77u);
      const uint16_t d = f2h(std::ldexp(1.0f + (v & 255) / 256.0f, -9 + int((v >> 8) & 1)));
      const uint16_t m = f2h(std::ldexp(1.0f + ((v >> 16) & 255) / 256.0f, -9 + int((v >> 24) & 1)));
      std::memcpy(h, &d, 2), std::memcpy(h + 2, &m, 2);
    }
}

// fp64 product of the dequantised tiled weight and x.
static void reference(const std::vector<uint8_t>& q, const std::vector<float>& x, int n, int k, std::vector<double>& out) {
  const int nb = k / 256;
  out.assign(n, 0.0);
  for (int row = 0; row < n; ++row) {
    const int tl = row / 16, r = row % 16, g = r % 8, hi8 = r / 8;
    double s = 0;
    for (int b = 0; b < nb; ++b) {
      const uint8_t* tb = q.data() + (size_t(tl) * nb + b) * kQ4KTileBytes;
      const uint8_t* h = tb + kQ4KTileHeads + 16 * r;
      uint16_t db, mb;
      std::memcpy(&db, h, 2), std::memcpy(&mb, h + 2, 2);
      const double d = h2f(db), dmin = h2f(mb);
      const uint8_t* sc = h + 4;
      for (int j = 0; j < 8; ++j) {
        int s6, m6;
        if (j < 4) s6 = sc[j] & 63, m6 = sc[j + 4] & 63;
        else s6 = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4), m6 = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
        const int c = j / 2;
        for (int l = 0; l < 32; ++l) {  // qs byte 32c + l = lane (g, t = l / 8) byte l % 8 of chunk c
          const int t = l / 8;
          const uint8_t byte = tb[512 * c + 16 * (4 * g + t) + 8 * hi8 + l % 8];
          const int lv = j & 1 ? byte >> 4 : byte & 15;
          s += (d * s6 * lv - dmin * m6) * x[size_t(b) * 256 + 64 * c + 32 * (j & 1) + l];
        }
      }
    }
    out[row] = s;
  }
}

struct Device {
  int n, k, copies;
  uint8_t* q;
  __half* x;
  int8_t* xq;
  float2* xds;
  float* out;
  std::vector<uint8_t> host_q;
  std::vector<float> host_x;
  std::vector<double> ref;  // fp64 product, made at the first check
  Device(int n_, int k_, int copies_) : n(n_), k(k_), copies(copies_) {
    fill_tiles(host_q, n, k, 1234u + n + k);
    const size_t wb = host_q.size();
    CK(cudaMalloc(&q, wb * copies));
    for (int c = 0; c < copies; ++c) CK(cudaMemcpy(q + wb * c, host_q.data(), wb, cudaMemcpyHostToDevice));
    host_x.resize(k);
    std::vector<uint16_t> xb(k);
    for (int i = 0; i < k; ++i) {
      const uint32_t v = hash(i, 4321u);
      // mostly N(0,1)-ish, with an outlier now and then
      float f = ((v & 0xFFFF) / 65536.0f - 0.5f) * 3.0f + ((v >> 16) & 0xFF) / 256.0f - 0.5f;
      if ((v >> 24) == 7) f *= 20.0f;
      xb[i] = f2h(f);
      host_x[i] = h2f(xb[i]);
    }
    CK(cudaMalloc(&x, 2 * k));
    CK(cudaMemcpy(x, xb.data(), 2 * k, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&xq, 2 * k));
    CK(cudaMalloc(&xds, 2 * sizeof(float2) * (k / 32)));
    CK(cudaMalloc(&out, 4 * n));
  }
  void release() {
    for (void* p : {(void*)q, (void*)x, (void*)xq, (void*)xds, (void*)out}) CK(cudaFree(p));
  }
  // x as int8 (one part, or two: h + l / 254) with per-32 (dx, dx * sum) for the kind.
  void quantise(Kind kind) {
    std::vector<int8_t> qv(2 * k, 0);
    std::vector<float2> ds(k / 32);
    for (int s = 0; s < k / 32; ++s) {
      float mx = 0;
      for (int i = 0; i < 32; ++i) mx = std::max(mx, std::fabs(host_x[32 * s + i]));
      const float dx = mx > 0 ? mx / 127.0f : 1.0f;
      double sum = 0;
      for (int i = 0; i < 32; ++i) {
        const float v = host_x[32 * s + i] / dx;
        const int h = std::max(-127, std::min(127, int(std::nearbyint(v))));
        const int l = std::max(-127, std::min(127, int(std::nearbyint((v - h) * 254.0f))));
        qv[32 * s + i] = int8_t(h);
        qv[k + 32 * s + i] = int8_t(l);
        sum += kind == kQ8x2 ? h + l / 254.0 : h;
      }
      ds[s] = make_float2(kind == kQ8x2 ? dx / 254.0f : dx, float(dx * sum));
    }
    CK(cudaMemcpy(xq, qv.data(), 2 * k, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(xds, ds.data(), sizeof(float2) * ds.size(), cudaMemcpyHostToDevice));
  }
  void launch(Kind kind, int warps, int copy, cudaStream_t st) {
    Args a{q + host_q.size() * copy, x, xq, xds, out, n, k};
    const dim3 grid(n / 16), block(32 * warps);
    switch (kind) {
      case kF16: gemv<kF16><<<grid, block, 0, st>>>(a); break;
      case kQ8: gemv<kQ8><<<grid, block, 0, st>>>(a); break;
      case kQ8x2: gemv<kQ8x2><<<grid, block, 0, st>>>(a); break;
      case kRead: gemv<kRead><<<grid, block, 0, st>>>(a); break;
    }
  }
};

static double check(Device& dv, Kind kind, int warps) {
  if (dv.ref.empty()) reference(dv.host_q, dv.host_x, dv.n, dv.k, dv.ref);
  const std::vector<double>& ref = dv.ref;
  CK(cudaMemset(dv.out, 0xFF, 4 * dv.n));  // poison (NaN)
  dv.launch(kind, warps, 0, 0);
  CK(cudaDeviceSynchronize());
  std::vector<float> o(dv.n);
  CK(cudaMemcpy(o.data(), dv.out, 4 * dv.n, cudaMemcpyDeviceToHost));
  double err = 0, mx = 0;
  for (int i = 0; i < dv.n; ++i) {
    const double e = std::fabs(o[i] - ref[i]);
    err = std::isnan(o[i]) ? INFINITY : std::max(err, e);
    mx = std::max(mx, std::fabs(ref[i]));
  }
  return err / mx;
}

static float time_us(Device& dv, Kind kind, int warps) {
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int c = 0; c < dv.copies; ++c) dv.launch(kind, warps, c, st);
  CK(cudaStreamSynchronize(st));
  CK(cudaGetLastError());
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  const int reps = 4;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int r = 0; r < reps; ++r)
    for (int c = 0; c < dv.copies; ++c) dv.launch(kind, warps, c, st);
  CK(cudaStreamEndCapture(st, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  std::vector<float> ts;
  for (int it = 0; it < 15; ++it) {
    cudaEventRecord(e0, st);
    cudaGraphLaunch(exec, st);
    cudaEventRecord(e1, st);
    CK(cudaEventSynchronize(e1));
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    ts.push_back(ms * 1000.f / (reps * dv.copies));
  }
  std::sort(ts.begin(), ts.end());
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec), cudaGraphDestroy(graph), cudaStreamDestroy(st);
  return ts[ts.size() / 2];
}

int main() {
  const char* names[] = {"f16", "q8", "q8x2", "read"};
  const bool sanitize = std::getenv("PROBE_SANITIZE") != nullptr;
  // Correctness at small and odd tile counts, every kind and warp count.
  std::printf("correctness: max |ours - fp64| / max |fp64|\n");
  for (auto nk : {std::pair<int, int>{16, 256}, {48, 768}, {208, 2304}, {1040, 4096}}) {
    Device dv(nk.first, nk.second, 1);
    for (int kind = 0; kind < 3; ++kind) {
      dv.quantise(Kind(kind));
      for (int w : {1, 2, 3, 8}) {
        if (w > nk.second / 256) continue;
        std::printf("  %5d x %5d %-5s warps %d: %.3g\n", nk.first, nk.second, names[kind], w, check(dv, Kind(kind), w));
      }
    }
    dv.release();
  }
  if (sanitize) return 0;
  std::printf("\ntimed, m = 1, us (median of CUDA-graph replays over rotated weight copies; %% of the read kind)\n");
  std::printf("| N x K | warps | f16 | q8 | q8x2 | read | f16 err | q8 err | q8x2 err |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (auto nk : {std::pair<int, int>{14336, 4096}, {4096, 14336}, {4096, 4096}}) {
    const size_t wb = size_t(nk.first / 16) * (nk.second / 256) * kQ4KTileBytes;
    const int copies = std::max<int>(8, int((400ull << 20) / wb) + 1);
    Device dv(nk.first, nk.second, copies);
    for (int w : {2, 4, 8}) {
      float t[4];
      double e[3];
      for (int kind = 0; kind < 4; ++kind) {
        if (kind < 3) {
          dv.quantise(Kind(kind));
          e[kind] = check(dv, Kind(kind), w);
        }
        t[kind] = time_us(dv, Kind(kind), w);
      }
      std::printf("| %d x %d | %d | %.2f | %.2f | %.2f | %.2f | %.2g | %.2g | %.2g |\n", nk.first, nk.second, w, t[0], t[1], t[2],
                  t[3], e[0], e[1], e[2]);
    }
    dv.release();
  }
  return 0;
}
