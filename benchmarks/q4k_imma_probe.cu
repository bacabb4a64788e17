// EXPERIMENT (issue 6), not part of the package: is the tiled Q4_K gemv at m = 1 held by
// its unpacking and MMAs, and would integer MMAs on int8 activations (llama.cpp's q8_1
// idea, on tensor cores) take it to the goal (<= 10.4 us at 14336 x 4096)?
//
// One skeleton, four inner loops, on the package's tiled Q4_K layout (ggml_blocks.h) as
// it was until the fiftieth session (each qs word's bytes in order; the package's words
// now hold bytes 0, 2, 1, 3). The probe makes and reads its own weights, so it is
// consistent with itself:
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
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "probe_util.cuh"
#include "ggml_blocks.h"
#include "gpu_launchers.h"
#include "ptx.cuh"


using inference_kernels::cuda::cp_async16;
using inference_kernels::cuda::cp_async16_ca;
using inference_kernels::cuda::cp_async_commit;
using inference_kernels::cuda::cp_async_wait;
using inference_kernels::cuda::ld_stream16;
using inference_kernels::cuda::smem_addr;
using inference_kernels::cuda::mma_m16n8k16;
using inference_kernels::ggml::kQ4KTileBytes;
using inference_kernels::ggml::kQ4KTileHeads;

enum Kind { kF16 = 0, kQ8 = 1, kQ8x2 = 2, kRead = 3, kQ8in = 4, kQ8x2in = 5, kLanded = 6, kLandedBf16 = 7 };
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

__device__ __forceinline__ void immau(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                      uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// x of one block as block_math reads it: f16 kinds the 256 fp16 elements (h); int8
// kinds the 256 int8 levels (q; the second part q2 bytes on) and the 8 (dx, X) (ds).
// SX: the pointers are in shared memory (plain loads), else global (through L1).
struct XBlock {
  const __half* h;
  const int8_t* q;
  int q2;
  const float2* ds;
};

template <bool SX, typename V, typename P>
__device__ __forceinline__ V ldx(const P* p) {
  if constexpr (SX) return *reinterpret_cast<const V*>(p);
  else return __ldg(reinterpret_cast<const V*>(p));
}

__host__ __device__ constexpr bool int8_x(Kind k) { return k == kQ8 || k == kQ8x2 || k == kQ8in || k == kQ8x2in; }
__host__ __device__ constexpr bool two_parts(Kind k) { return k == kQ8x2 || k == kQ8x2in; }
__host__ __device__ constexpr bool in_kernel(Kind k) { return k == kQ8in || k == kQ8x2in; }

// The scale table of one tile block: lane pair half h of row lane / 2, sub-blocks
// 4h..4h+3. f16: ds and dc = 1024 ds + dm (high nibbles read as 16 q: ds / 16); int8 x:
// ds dx, and the half row's min term sum dm X at column 16 + h.
template <Kind K, bool SX>
__device__ __forceinline__ void scale_table(int lane, const uint4& head, float* table, const XBlock& xb) {
  const bool h = lane & 1;
  const uint32_t s0 = head.y, s1 = head.z, s2 = head.w;
  const uint32_t scw = h ? (s2 & 0x0F0F0F0Fu) | ((s0 >> 2) & 0x30303030u) : s0 & 0x3F3F3F3Fu;
  const uint32_t mnw = h ? ((s2 >> 4) & 0x0F0F0F0Fu) | ((s1 >> 2) & 0x30303030u) : s1 & 0x3F3F3F3Fu;
  const float d = __half2float(__ushort_as_half(uint16_t(head.x)));
  const float dmin = __half2float(__ushort_as_half(uint16_t(head.x >> 16)));
  const float d_hi = d * 0.0625f;
  float* row = table + (lane >> 1) * kStride + 4 * h;
  if constexpr (!int8_x(K)) {
    float ds[4], dc[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      ds[i] = (i & 1 ? d_hi : d) * byte_to_float(scw, i);
      dc[i] = fmaf(1024.0f, ds[i], dmin * byte_to_float(mnw, i));
    }
    *reinterpret_cast<float4*>(row) = make_float4(ds[0], ds[1], ds[2], ds[3]);
    *reinterpret_cast<float4*>(row + 8) = make_float4(dc[0], dc[1], dc[2], dc[3]);
  } else {
    const float4 xa = ldx<SX, float4>(xb.ds + 4 * h), xc = ldx<SX, float4>(xb.ds + 4 * h + 2);
    const float dx[4] = {xa.x, xa.z, xc.x, xc.z}, X[4] = {xa.y, xa.w, xc.y, xc.w};
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

// One K block of TT tiles (TT = 2: two 16-row tiles share x's loads and, f16, the
// activation-sum MMAs): the scale tables, then 4 chunks. wchunk(tt, c): the lane's 16
// bytes of chunk c of tile tt (rows g: x, y; g + 8: z, w); head(tt) its row's head.
template <Kind K, bool SX, int TT, typename WChunk, typename Head>
__device__ __forceinline__ void block_math(int lane, WChunk wchunk, Head head, float* table, const XBlock& xb,
                                           float (&acc0)[TT], float (&acc2)[TT]) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int tt = 0; tt < TT; ++tt) scale_table<K, SX>(lane, head(tt), table + tt * 16 * kStride, xb);
  __syncwarp();
  // Two tiles with every chunk unrolled spill at 128 registers (ptxas 13.0).
  constexpr int kUnroll = TT == 1 ? 4 : 2;
#pragma unroll kUnroll
  for (int c = 0; c < 4; ++c) {
    const int xo = 64 * c + 8 * t;  // sub-block 2c at xo, 2c + 1 at xo + 32
    if constexpr (!int8_x(K)) {
      const uint4 xl = ldx<SX, uint4>(xb.h + xo), xh = ldx<SX, uint4>(xb.h + xo + 32);
      constexpr uint32_t one = 0x3C003C00u;
      float xsl[4] = {}, xsh[4] = {};
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        mma_m16n8k16<false>(xsl, one, one, one, one, v ? xl.z : xl.x, v ? xl.w : xl.y);
        mma_m16n8k16<false>(xsh, one, one, one, one, v ? xh.z : xh.x, v ? xh.w : xh.y);
      }
#pragma unroll
      for (int tt = 0; tt < TT; ++tt) {
        const uint4 wv = wchunk(tt, c);
        const uint32_t w[4] = {wv.x, wv.y, wv.z, wv.w};
        const float* tg = table + tt * 16 * kStride + g * kStride;
        const float* th = tg + 8 * kStride;
        float sl[4] = {}, sh[4] = {};
#pragma unroll
        for (int v = 0; v < 2; ++v) {
          const uint32_t lg = w[v] & 0x0F0F0F0Fu, hg = w[v] & 0xF0F0F0F0u;
          const uint32_t lh = w[2 + v] & 0x0F0F0F0Fu, hh = w[2 + v] & 0xF0F0F0F0u;
          mma_m16n8k16<false>(sl, level_pair(lg, 0), level_pair(lh, 0), level_pair(lg, 1), level_pair(lh, 1),
                              v ? xl.z : xl.x, v ? xl.w : xl.y);
          mma_m16n8k16<false>(sh, level_pair(hg, 0), level_pair(hh, 0), level_pair(hg, 1), level_pair(hh, 1),
                              v ? xh.z : xh.x, v ? xh.w : xh.y);
        }
        const float2 dsg = *reinterpret_cast<const float2*>(tg + 2 * c);
        const float2 dsh = *reinterpret_cast<const float2*>(th + 2 * c);
        const float2 dcg = *reinterpret_cast<const float2*>(tg + 8 + 2 * c);
        const float2 dch = *reinterpret_cast<const float2*>(th + 8 + 2 * c);
        acc0[tt] = fmaf(dsg.x, sl[0], fmaf(-dcg.x, xsl[0], acc0[tt]));
        acc2[tt] = fmaf(dsh.x, sl[2], fmaf(-dch.x, xsl[2], acc2[tt]));
        acc0[tt] = fmaf(dsg.y, sh[0], fmaf(-dcg.y, xsh[0], acc0[tt]));
        acc2[tt] = fmaf(dsh.y, sh[2], fmaf(-dch.y, xsh[2], acc2[tt]));
      }
    } else {
      const uint2 ql = ldx<SX, uint2>(xb.q + xo), qh = ldx<SX, uint2>(xb.q + xo + 32);
      uint2 pl = {}, ph = {};
      if constexpr (two_parts(K)) pl = ldx<SX, uint2>(xb.q + xb.q2 + xo), ph = ldx<SX, uint2>(xb.q + xb.q2 + xo + 32);
#pragma unroll
      for (int tt = 0; tt < TT; ++tt) {
        // A (u8): a0 row g k 4t.. (bytes 8t..8t+3), a2 row g k 16 + 4t.. (bytes 8t + 4..),
        // a1/a3 row g + 8; high nibbles as 16 q. B: x's levels at 8t.. of the sub-block.
        const uint4 wv = wchunk(tt, c);
        const float* tg = table + tt * 16 * kStride + g * kStride;
        const float* th = tg + 8 * kStride;
        const uint32_t lg0 = wv.x & 0x0F0F0F0Fu, lg1 = wv.y & 0x0F0F0F0Fu;
        const uint32_t lh0 = wv.z & 0x0F0F0F0Fu, lh1 = wv.w & 0x0F0F0F0Fu;
        const uint32_t hg0 = wv.x & 0xF0F0F0F0u, hg1 = wv.y & 0xF0F0F0F0u;
        const uint32_t hh0 = wv.z & 0xF0F0F0F0u, hh1 = wv.w & 0xF0F0F0F0u;
        int sl[4] = {}, sh[4] = {};
        immau(sl, lg0, lh0, lg1, lh1, ql.x, ql.y);
        immau(sh, hg0, hh0, hg1, hh1, qh.x, qh.y);
        int s_l0 = sl[0], s_l2 = sl[2], s_h0 = sh[0], s_h2 = sh[2];
        if constexpr (two_parts(K)) {
          int ll[4] = {}, lh[4] = {};
          immau(ll, lg0, lh0, lg1, lh1, pl.x, pl.y);
          immau(lh, hg0, hh0, hg1, hh1, ph.x, ph.y);
          s_l0 = s_l0 * 254 + ll[0], s_l2 = s_l2 * 254 + ll[2];
          s_h0 = s_h0 * 254 + lh[0], s_h2 = s_h2 * 254 + lh[2];
        }
        const float2 dsg = *reinterpret_cast<const float2*>(tg + 2 * c);
        const float2 dsh = *reinterpret_cast<const float2*>(th + 2 * c);
        acc0[tt] = fmaf(dsg.x, float(s_l0), acc0[tt]);
        acc2[tt] = fmaf(dsh.x, float(s_l2), acc2[tt]);
        acc0[tt] = fmaf(dsg.y, float(s_h0), acc0[tt]);
        acc2[tt] = fmaf(dsh.y, float(s_h2), acc2[tt]);
      }
    }
  }
  if constexpr (int8_x(K)) {
#pragma unroll
    for (int tt = 0; tt < TT; ++tt) {
      const float* tg = table + tt * 16 * kStride + g * kStride;
      const float2 mg = *reinterpret_cast<const float2*>(tg + 16), mh = *reinterpret_cast<const float2*>(tg + 8 * kStride + 16);
      acc0[tt] -= mg.x + mg.y;
      acc2[tt] -= mh.x + mh.y;
    }
  }
  __syncwarp();  // the tables are rewritten for the next block
}

// The low bytes of a, b, c, d (levels in [-127, 127]) as one word, a lowest.
__device__ __forceinline__ uint32_t pack_s8(int a, int b, int c, int d) {
  return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

// The in-kernel kinds: the block's 256 fp16 x (a stage's slot) to int8 levels (one or two
// parts) and (dx, X) a sub-block in the warp's scratch. Lane j takes elements 8j..8j+7 (sub-
// block j / 4; its four lanes meet by shuffles).
template <Kind K>
__device__ __forceinline__ void quantise_x(int lane, const __half* xs, int8_t* q, float2* ds) {
  const uint4 raw = *reinterpret_cast<const uint4*>(xs + 8 * lane);
  const uint32_t rw[4] = {raw.x, raw.y, raw.z, raw.w};
  float v[8];
  float mx = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&rw[i]));
    v[2 * i] = f.x, v[2 * i + 1] = f.y;
    mx = fmaxf(mx, fmaxf(fabsf(f.x), fabsf(f.y)));
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float inv = mx > 0.f ? 127.0f / mx : 0.f;
  const float dx = mx * (1.0f / 127.0f);
  int hq[8], lq[8], sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float u = v[i] * inv;
    hq[i] = __float2int_rn(u);
    if constexpr (two_parts(K)) {
      lq[i] = __float2int_rn((u - float(hq[i])) * 254.0f);
      sum += 254 * hq[i] + lq[i];
    } else {
      sum += hq[i];
    }
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  *reinterpret_cast<uint2*>(q + 8 * lane) = make_uint2(pack_s8(hq[0], hq[1], hq[2], hq[3]), pack_s8(hq[4], hq[5], hq[6], hq[7]));
  if constexpr (two_parts(K))
    *reinterpret_cast<uint2*>(q + 256 + 8 * lane) =
        make_uint2(pack_s8(lq[0], lq[1], lq[2], lq[3]), pack_s8(lq[4], lq[5], lq[6], lq[7]));
  const float scale = two_parts(K) ? dx * (1.0f / 254.0f) : dx;
  if ((lane & 3) == 0) ds[lane >> 2] = make_float2(scale, scale * float(sum));
  __syncwarp();
}

// Both skeletons end the same way: the warps' sums in a fixed order, t = 0 lanes' rows.
template <int TT>
__device__ __forceinline__ void finish(const Args& a, float (*part)[32], int W, const float (&acc0)[TT],
                                       const float (&acc2)[TT]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if ((lane & 3) == 0) {
#pragma unroll
    for (int tt = 0; tt < TT; ++tt) {
      part[warp][16 * tt + (lane >> 2)] = acc0[tt];
      part[warp][16 * tt + (lane >> 2) + 8] = acc2[tt];
    }
  }
  __syncthreads();
  if (threadIdx.x < 16 * TT) {
    float s = 0.f;
    for (int w = 0; w < W; ++w) s += part[w][threadIdx.x];
    const int row = blockIdx.x * 16 * TT + threadIdx.x;
    if (row < a.n) a.out[row] = s;
  }
}

// Skeleton 1 (direct): the next tile block in registers while the current one is worked.
template <int K_>
__global__ void __launch_bounds__(256) gemv(Args a) {
  constexpr Kind K = Kind(K_);
  __shared__ float tables[8][16 * kStride];
  __shared__ float part[8][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5;
  const int nb = a.k / 256;
  const int b0 = warp * nb / W, b1 = (warp + 1) * nb / W;
  const uint8_t* tile = a.q + int64_t(blockIdx.x) * nb * kQ4KTileBytes;
  const uint8_t* at = tile + 16 * lane;
  const uint8_t* head = tile + kQ4KTileHeads + 16 * (lane >> 1);
  float acc0[1] = {0.f}, acc2[1] = {0.f};
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
      const XBlock xb{a.x + 256 * b, a.xq + 256 * b, a.k, a.xds + 8 * b};
      block_math<K, false, 1>(
          lane, [&](int, int c) { return cur.c[c]; }, [&](int) { return cur.head; }, tables[warp], xb, acc0, acc2);
    }
    cur = nxt;
  }
  if constexpr (K == kRead) acc0[0] = __uint_as_float(xr & 0x807FFFFFu);  // keeps the loads
  finish<1>(a, part, W, acc0, acc2);
}

// Skeleton 2 (staged, as the landed XS loop): S stages a warp, each TT tile blocks (TT
// 16-row tiles a CTA, the same K block) and their x (fp16 512 bytes; q8 256 + 64; q8x2
// 512 + 64), copied by the lanes' cp.async; read from the stage a chunk at a time; the
// stage refilled after the block's arithmetic.
template <Kind K>
constexpr int kXSlot = int8_x(K) && !in_kernel(K) ? (two_parts(K) ? 576 : 320) : 512;
template <Kind K>
constexpr int kScratch = in_kernel(K) ? 512 + 64 : 0;
template <Kind K, int S, int TT>
constexpr int kWarpBytes = S * (TT * kQ4KTileBytes + kXSlot<K>) + kScratch<K> + TT * 16 * kStride * 4;

template <int K_, int S, int TT>
__global__ void __launch_bounds__(256, 2) gemv_staged(Args a) {
  constexpr Kind K = Kind(K_);
  constexpr int kStage = TT * kQ4KTileBytes;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ float part[8][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5;
  const int nb = a.k / 256, tiles = a.n / 16;
  const int b0 = warp * nb / W, b1 = (warp + 1) * nb / W, n = b1 - b0;
  uint8_t* region = smem + warp * kWarpBytes<K, S, TT>;
  uint8_t* xslots = region + S * kStage;
  int8_t* scratch = reinterpret_cast<int8_t*>(xslots + S * kXSlot<K>);
  float* table = reinterpret_cast<float*>(xslots + S * kXSlot<K> + kScratch<K>);
  const uint8_t* wsrc[TT];
#pragma unroll
  for (int tt = 0; tt < TT; ++tt)  // a tile past the last reads the last again (not stored)
    wsrc[tt] = a.q + (int64_t(min(blockIdx.x * TT + tt, tiles - 1)) * nb + b0) * kQ4KTileBytes + 16 * lane;
  int blk = b0;
  const auto issue = [&](int si) {
#pragma unroll
    for (int tt = 0; tt < TT; ++tt) {
      const uint32_t dst = smem_addr(region + si * kStage + tt * kQ4KTileBytes) + 16 * lane;
#pragma unroll
      for (int j = 0; j < 4; ++j) cp_async16(dst + 512 * j, wsrc[tt] + 512 * j);
      if (lane < 16) cp_async16(dst + 2048, wsrc[tt] + 2048);
      wsrc[tt] += kQ4KTileBytes;
    }
    const uint32_t xd = smem_addr(xslots + si * kXSlot<K>);
    if constexpr (!int8_x(K) || in_kernel(K)) {
      cp_async16_ca(xd + 16 * lane, a.x + 256 * blk + 8 * lane);
    } else {
      const int8_t* xq = a.xq + 256 * blk;
      if (!two_parts(K) && lane < 16) cp_async16_ca(xd + 16 * lane, xq + 16 * lane);
      if (two_parts(K)) cp_async16_ca(xd + 16 * lane, lane < 16 ? xq + 16 * lane : xq + a.k + 16 * (lane - 16));
      const int dso = two_parts(K) ? 512 : 256;
      if (lane < 4) cp_async16_ca(xd + dso + 16 * lane, reinterpret_cast<const uint8_t*>(a.xds + 8 * blk) + 16 * lane);
    }
    ++blk;
  };
#pragma unroll
  for (int s = 0; s < S; ++s) {
    if (s < n) issue(s);
    cp_async_commit();
  }
  float acc0[TT] = {}, acc2[TT] = {};
  int s = 0;
  for (int i = 0; i < n; ++i) {
    const uint8_t* stage = region + s * kStage;
    const uint8_t* xs = xslots + s * kXSlot<K>;
    cp_async_wait<S - 1>();
    __syncwarp();
    const auto head = [&](int tt) {
      return *reinterpret_cast<const uint4*>(stage + tt * kQ4KTileBytes + 2048 + 16 * (lane >> 1));
    };
    const auto wchunk = [&](int tt, int c) {
      return *reinterpret_cast<const uint4*>(stage + tt * kQ4KTileBytes + 512 * c + 16 * lane);
    };
    if constexpr (in_kernel(K)) {
      float2* ds = reinterpret_cast<float2*>(scratch + 512);
      quantise_x<K>(lane, reinterpret_cast<const __half*>(xs), scratch, ds);
      block_math<K, true, TT>(lane, wchunk, head, table, XBlock{nullptr, scratch, 256, ds}, acc0, acc2);
    } else if constexpr (int8_x(K)) {
      const XBlock xb{nullptr, reinterpret_cast<const int8_t*>(xs), 256,
                      reinterpret_cast<const float2*>(xs + (two_parts(K) ? 512 : 256))};
      block_math<K, true, TT>(lane, wchunk, head, table, xb, acc0, acc2);
    } else {
      block_math<K, true, TT>(lane, wchunk, head, table,
                              XBlock{reinterpret_cast<const __half*>(xs), nullptr, 0, nullptr}, acc0, acc2);
    }
    if (i + S < n) issue(s);
    cp_async_commit();
    s = s + 1 == S ? 0 : s + 1;
  }
  cp_async_wait<0>();
  finish<TT>(a, part, W, acc0, acc2);
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
  __nv_bfloat16* xbf;  // the same x in bf16 (exact)
  int8_t* xq;
  float2* xds;
  float* out;
  __half* outh;  // the landed kernel's output (x's dtype)
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
    std::vector<__nv_bfloat16> xbh(k);
    for (int i = 0; i < k; ++i) {
      const uint32_t v = hash(i, 4321u);
      // mostly N(0,1)-ish, with an outlier now and then
      float f = ((v & 0xFFFF) / 65536.0f - 0.5f) * 3.0f + ((v >> 16) & 0xFF) / 256.0f - 0.5f;
      if ((v >> 24) == 7) f *= 20.0f;
      f = __bfloat162float(__float2bfloat16_rn(f));  // exact in bf16 and in fp16 (no subnormals)
      if (std::fabs(f) < 0x1p-12f) f = 0x1p-12f;
      xb[i] = f2h(f);
      host_x[i] = h2f(xb[i]);
      xbh[i] = __float2bfloat16_rn(host_x[i]);
    }
    CK(cudaMalloc(&x, 2 * k));
    CK(cudaMemcpy(x, xb.data(), 2 * k, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&xbf, 2 * k));
    CK(cudaMemcpy(xbf, xbh.data(), 2 * k, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&xq, 2 * k));
    CK(cudaMalloc(&xds, 2 * sizeof(float2) * (k / 32)));
    CK(cudaMalloc(&out, 4 * n));
    CK(cudaMalloc(&outh, 2 * n));
  }
  void release() {
    for (void* p : {(void*)q, (void*)x, (void*)xbf, (void*)xq, (void*)xds, (void*)out, (void*)outh}) CK(cudaFree(p));
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
  // S = 0: the direct skeleton; S = 3: the staged one, TT tiles a CTA.
  void launch(Kind kind, int S, int TT, int warps, int copy, cudaStream_t st) {
    Args a{q + host_q.size() * copy, x, xq, xds, out, n, k};
    const dim3 block(32 * warps);
    if (kind == kLanded || kind == kLandedBf16) {  // the package's kernel (q4k.cu), its own K split
      using namespace inference_kernels;
      const bool bf = kind == kLandedBf16;
      const KQuantGemvParams p{bf ? DType::kBFloat16 : DType::kFloat16, KQuant::kQ4K, bf ? (const void*)xbf : x, k, a.q, outh, 1, n, k, true};
      CK(cudaError_t(kquant_gemv_launch(p, st)));
      return;
    }
    if (S == 0) {
      const dim3 grid(n / 16);
      switch (kind) {
        case kF16: gemv<kF16><<<grid, block, 0, st>>>(a); break;
        case kQ8: gemv<kQ8><<<grid, block, 0, st>>>(a); break;
        case kQ8x2: gemv<kQ8x2><<<grid, block, 0, st>>>(a); break;
        case kRead: gemv<kRead><<<grid, block, 0, st>>>(a); break;
        default: std::printf("no direct kind %d\n", int(kind)), std::exit(1);
      }
      return;
    }
    if (TT == 2) return staged_tt<2>(kind, block, st, a);
    staged_tt<1>(kind, block, st, a);
  }
  template <int TT>
  void staged_tt(Kind kind, dim3 block, cudaStream_t st, const Args& a) {
    const dim3 grid((n / 16 + TT - 1) / TT);
    switch (kind) {
      case kF16: staged<kF16, TT>(grid, block, st, a); break;
      case kQ8: staged<kQ8, TT>(grid, block, st, a); break;
      case kQ8x2: staged<kQ8x2, TT>(grid, block, st, a); break;
      case kQ8in: staged<kQ8in, TT>(grid, block, st, a); break;
      case kQ8x2in: staged<kQ8x2in, TT>(grid, block, st, a); break;
      default: std::printf("no staged kind %d\n", int(kind)), std::exit(1);
    }
  }
  template <Kind K, int TT>
  static void staged(dim3 grid, dim3 block, cudaStream_t st, const Args& a) {
    constexpr int bytes = kWarpBytes<K, 3, TT>;
    static bool once = false;
    if (!once) {
      CK(cudaFuncSetAttribute(gemv_staged<K, 3, TT>, cudaFuncAttributeMaxDynamicSharedMemorySize, 8 * bytes));
      once = true;
    }
    gemv_staged<K, 3, TT><<<grid, block, (block.x / 32) * bytes, st>>>(a);
  }
};

static double check(Device& dv, Kind kind, int S, int TT, int warps) {
  if (dv.ref.empty()) reference(dv.host_q, dv.host_x, dv.n, dv.k, dv.ref);
  const std::vector<double>& ref = dv.ref;
  CK(cudaMemset(dv.out, 0xFF, 4 * dv.n));  // poison (NaN)
  CK(cudaMemset(dv.outh, 0xFF, 2 * dv.n));
  dv.launch(kind, S, TT, warps, 0, 0);
  CK(cudaDeviceSynchronize());
  std::vector<float> o(dv.n);
  if (kind == kLanded) {
    std::vector<__half> oh(dv.n);
    CK(cudaMemcpy(oh.data(), dv.outh, 2 * dv.n, cudaMemcpyDeviceToHost));
    for (int i = 0; i < dv.n; ++i) o[i] = __half2float(oh[i]);
  } else if (kind == kLandedBf16) {
    std::vector<__nv_bfloat16> oh(dv.n);
    CK(cudaMemcpy(oh.data(), dv.outh, 2 * dv.n, cudaMemcpyDeviceToHost));
    for (int i = 0; i < dv.n; ++i) o[i] = __bfloat162float(oh[i]);
  } else {
    CK(cudaMemcpy(o.data(), dv.out, 4 * dv.n, cudaMemcpyDeviceToHost));
  }
  double err = 0, mx = 0;
  for (int i = 0; i < dv.n; ++i) {
    const double e = std::fabs(o[i] - ref[i]);
    err = std::isnan(o[i]) ? INFINITY : std::max(err, e);
    mx = std::max(mx, std::fabs(ref[i]));
  }
  return err / mx;
}

// Median us a launch (probe_util.cuh's CUDA-graph timer over the rotated weight copies;
// s31a-s31i ran this file's own copy of it, with 15 replays instead of 12).
static float time_us(Device& dv, Kind kind, int S, int TT, int warps) {
  return probe::graph_time_us(dv.copies, [&](int c, cudaStream_t st) {
    dv.launch(kind, S, TT, warps, c, st);
    return cudaGetLastError();
  });
}

struct Variant {
  Kind kind;
  int S, TT;
  const char* name;
};
// (s31a-s31d also timed the direct skeleton's f16, q8 and q8x2 and the two-tile kinds;
// s31f the bf16 x XS loop against the x-ahead loop. BENCHMARKS.md, thirty-first session.)
static const Variant kVariants[] = {
    {kLanded, 0, 1, "landed"}, {kLandedBf16, 0, 1, "landed bf16"}, {kRead, 0, 1, "read"},
    {kF16, 3, 1, "st f16"},    {kQ8, 3, 1, "st q8"},               {kQ8x2, 3, 1, "st q8x2"},
    {kQ8in, 3, 1, "st q8in"},  {kQ8in, 3, 2, "2t q8in"}};

int main() {
  const bool sanitize = std::getenv("PROBE_SANITIZE") != nullptr;
  // Correctness at small and odd tile counts, every variant and warp count.
  std::printf("correctness: max |ours - fp64| / max |fp64|\n");
  for (auto nk : {std::pair<int, int>{16, 256}, {48, 768}, {208, 2304}, {1040, 4096}}) {
    Device dv(nk.first, nk.second, 1);
    for (const Variant& v : kVariants) {
      if (v.kind == kRead) continue;
      dv.quantise(v.kind);
      std::printf("  %5d x %5d %-10s", nk.first, nk.second, v.name);
      for (int w : {1, 2, 3, 8})
        if (w <= nk.second / 256) std::printf("  warps %d: %.3g", w, check(dv, v.kind, v.S, v.TT, w));
      std::printf("\n");
    }
    dv.release();
  }
  if (sanitize) return 0;
  std::printf("\ntimed, m = 1, us (median of CUDA-graph replays over rotated weight copies); err: max |ours - fp64| / max |fp64|\n|");
  std::printf(" N x K | warps |");
  for (const Variant& v : kVariants) std::printf(" %s |", v.name);
  std::printf("\n|---|---:|");
  for (size_t i = 0; i < sizeof(kVariants) / sizeof(kVariants[0]); ++i) std::printf("---:|");
  std::printf("\n");
  std::vector<std::string> errs;
  for (auto nk : {std::pair<int, int>{14336, 4096}, {4096, 14336}, {4096, 4096}}) {
    const size_t wb = size_t(nk.first / 16) * (nk.second / 256) * kQ4KTileBytes;
    const int copies = std::max<int>(8, int((400ull << 20) / wb) + 1);
    Device dv(nk.first, nk.second, copies);
    for (int w : {2, 4, 8}) {
      std::printf("| %d x %d | %d |", nk.first, nk.second, w);
      char line[512];
      int at = std::snprintf(line, sizeof line, "%d x %d, %d warps:", nk.first, nk.second, w);
      for (const Variant& v : kVariants) {
        if (v.kind != kRead) {
          dv.quantise(v.kind);
          at += std::snprintf(line + at, sizeof line - at, " %s %.2g", v.name, check(dv, v.kind, v.S, v.TT, w));
        }
        std::printf(" %.2f |", time_us(dv, v.kind, v.S, v.TT, w));
        std::fflush(stdout);
      }
      std::printf("\n");
      errs.push_back(line);
    }
    dv.release();
  }
  std::printf("\n");
  for (const auto& e : errs) std::printf("%s\n", e.c_str());
  return 0;
}
