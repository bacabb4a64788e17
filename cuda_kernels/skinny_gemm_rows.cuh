// The skinny FP8 GEMM's convert 7 (M <= 2, whole weight rows a block, no tensor cores),
// its persistent form, and the byte-load kernel for any layout. See skinny_gemm.cu.
#pragma once

#include "skinny_gemm_common.cuh"

namespace {

// convert 7 (M <= 2, MR rows of a): whole weight rows a block, no split of K between blocks. Every split
// of K over blocks ends in a reduction that waits for the block of its tile that finishes
// last; in a read-only model of 2304 x 16384 (benchmarks/q4k_read_probe.cu, s41c-s41e)
// that wait cost 0.7-1.9 us where the blocks met in a cluster and 1.0-1.2 us through a
// global workspace and a ticket, on top of the loads alone (10.5-10.8 us). Blocks of R
// rows x all of K, threads 16 bytes apart with V 16-byte segments of every row in flight
// (and x's, through L1, where the SM's blocks share it), read the same 37 MB in 9.9-10.1
// us: as many blocks as rows / R, refilled by the hardware as they end.
// Arithmetic (tensor cores need 16 rows a warp): x's segment to f16 (exact) and times
// 2^-8 (exact: e4m3's smallest value becomes an f16 subnormal with its bits), so that
// no product of two e4m3 values, at most 448 * 448 / 256, overflows f16; each product is
// exact in f16 down to 2^-24 (below that, products of two near-subnormal values round). F32
// = false: a segment's 8 pairs summed by HFMA2 in f16 (16 values, at most 12544:
// rounding 2^-11 relative to a sum of 8), then in fp32; F32 = true: every product in fp32.
constexpr int kRowsThreads = 256;

__device__ __forceinline__ uint32_t hmul2_u(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t hfma2_u(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ float2 f16x2_to_float2(uint32_t h) {
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

template <typename OutT, int R, int V, bool F32, int MR>
__global__ void __launch_bounds__(kRowsThreads, 1) skinny_gemm_rows_kernel(const SkinnyGemmParams p) {
  pdl_enter();
  __shared__ float part[kRowsThreads / 32][MR * R];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int64_t n0 = int64_t(blockIdx.x) * R;
  const uint8_t* arow[MR];
#pragma unroll
  for (int m = 0; m < MR; ++m) arow[m] = static_cast<const uint8_t*>(p.a) + m * p.lda;
  const uint8_t* brow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) brow[r] = static_cast<const uint8_t*>(p.b) + std::min<int64_t>(n0 + r, p.N - 1) * p.ldb;
  constexpr uint32_t kTwoM8 = 0x1C001C00u;  // 2^-8 in both f16 halves
  float acc[MR][R] = {};
  for (int64_t k0 = int64_t(t) * 16; k0 < p.K; k0 += int64_t(kRowsThreads) * V * 16) {
    uint4 x[MR][V], w[R][V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t off = k0 + int64_t(j) * kRowsThreads * 16;
#pragma unroll
      for (int m = 0; m < MR; ++m) x[m][j] = load16<false>(arow[m] + off, p.K - off);
#pragma unroll
      for (int r = 0; r < R; ++r) w[r][j] = load16<true>(brow[r] + off, p.K - off);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
#pragma unroll
      for (int m = 0; m < MR; ++m) after_loads(x[m][j]);
#pragma unroll
      for (int r = 0; r < R; ++r) after_loads(w[r][j]);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
#pragma unroll
      for (int m = 0; m < MR; ++m) {
        F16x8 xs = to_f16(x[m][j]);
        if constexpr (F32) {
          float2 xf[8];
#pragma unroll
          for (int i = 0; i < 8; ++i) xf[i] = f16x2_to_float2(xs.f[i]);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const F16x8 wf = to_f16(w[r][j]);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
              const float2 v = f16x2_to_float2(wf.f[i]);
              acc[m][r] = fmaf(v.x, xf[i].x, acc[m][r]);
              acc[m][r] = fmaf(v.y, xf[i].y, acc[m][r]);
            }
          }
        } else {
#pragma unroll
          for (int i = 0; i < 8; ++i) xs.f[i] = hmul2_u(xs.f[i], kTwoM8);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const F16x8 wf = to_f16(w[r][j]);
            uint32_t h = hmul2_u(wf.f[0], xs.f[0]);
#pragma unroll
            for (int i = 1; i < 8; ++i) h = hfma2_u(wf.f[i], xs.f[i], h);
            const float2 v = f16x2_to_float2(h);
            acc[m][r] += v.x + v.y;
          }
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < MR; ++m) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float v = acc[m][r];
#pragma unroll
      for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
      if (lane == 0) part[warp][m * R + r] = v;
    }
  }
  __syncthreads();
  const int r = t % R, m = t / R;
  if (t < MR * R && n0 + r < p.N) {
    const int64_t n = n0 + r;
    float sum = 0.0f;
#pragma unroll
    for (int q = 0; q < kRowsThreads / 32; ++q) sum += part[q][t];
    float y = (F32 ? sum : sum * 256.0f) * (*p.scale_a * p.scale_b[p.scale_b_per_channel ? n : 0]);
    if (p.bias) y += to_float(static_cast<const OutT*>(p.bias)[n]);
    static_cast<OutT*>(p.out)[m * p.ldo + n] = from_float<OutT>(y);
  }
}

// convert 7 where a row is one pass of V segments a thread (K <= 4 KB x V) and the launcher
// picks the division: persistent blocks, two an SM, each taking weight rows blockIdx.x, +
// gridDim.x, ..., with the next row's loads in flight during this row's arithmetic; x is
// read once a block and kept as f16. The one-shot blocks above load, then compute, then
// meet at the barrier, then end, and their SM's loads pause meanwhile (2304 x 16384: 11.34
// us against the rows read alone in 9.9-10.1). Two named register stages: no register
// move waits on a load. Deeper (3 or 4 stages) ran slower, 12.9 / 13.5 us: ptxas sank
// the later stages' loads below the arithmetic; so did 3 blocks an SM (12.2) and two rows
// a stage (12.5) (s46e, s46f). One barrier a row: the warps' partial sums alternate
// between two shared arrays by the row's parity. The same sums, in the same order and
// rounding steps, as skinny_gemm_rows_kernel<R = 1, F32 = false>: the same bits.
constexpr int kRowsPersistBlocks = 2;  // blocks an SM

template <typename OutT, int V, int MR>
__global__ void __launch_bounds__(kRowsThreads, kRowsPersistBlocks) skinny_gemm_rows_persist_kernel(const SkinnyGemmParams p) {
  __shared__ float part[2][MR][kRowsThreads / 32];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int64_t G = gridDim.x;
  const auto* b = static_cast<const uint8_t*>(p.b);
  // The first two rows into L2 while the kernel before ends (K % 16 == 0 here).
  if (t < 2 && blockIdx.x + t * G < p.N) prefetch_l2(b + (blockIdx.x + t * G) * p.ldb, uint32_t(p.K));
  pdl_enter();
  constexpr uint32_t kTwoM8 = 0x1C001C00u;  // 2^-8 in both f16 halves
  // Row 0 of a in registers; rows 1.. in shared memory, each thread's own words, lanes 16
  // bytes apart (held in registers too, ptxas sank the next row's loads below this row's
  // arithmetic at the 128-register cap).
  __shared__ uint4 xsh[MR > 1 ? MR - 1 : 1][V][2][kRowsThreads];
  F16x8 xs[V];
#pragma unroll
  for (int m = 0; m < MR; ++m) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t off = int64_t(t) * 16 + int64_t(j) * kRowsThreads * 16;
      F16x8 v = to_f16(load16<false>(static_cast<const uint8_t*>(p.a) + m * p.lda + off, p.K - off));
#pragma unroll
      for (int i = 0; i < 8; ++i) v.f[i] = hmul2_u(v.f[i], kTwoM8);
      if (m == 0) {
        xs[j] = v;
      } else {
        xsh[m - 1][j][0][t] = make_uint4(v.f[0], v.f[1], v.f[2], v.f[3]);
        xsh[m - 1][j][1][t] = make_uint4(v.f[4], v.f[5], v.f[6], v.f[7]);
      }
    }
  }
  const float sa = *p.scale_a;
  // A stage: row n's segments, its scale_b and bias (every thread: no branch before the
  // loads). Past the last row: the last row again (from L2), so that none is conditional.
  const auto load = [&](int64_t n, uint4 (&w)[V], float& f, float& bias) {
    n = std::min(n, p.N - 1);
    f = p.scale_b[p.scale_b_per_channel ? n : 0];
    bias = p.bias ? to_float(static_cast<const OutT*>(p.bias)[n]) : 0.0f;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t off = int64_t(t) * 16 + int64_t(j) * kRowsThreads * 16;
      w[j] = ld_stream16_ordered(b + n * p.ldb + std::min(off, p.K - 16));
    }
  };
  const auto finish = [&](int64_t n, uint4 (&w)[V], float f, float bias, int parity) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      after_loads(w[j]);
      // Segments past K were loaded from the row's last one (no predicate on the loads:
      // ptxas sank a predicated one below the arithmetic) and count as zeros.
      if (int64_t(t) * 16 + int64_t(j) * kRowsThreads * 16 >= p.K) w[j] = make_uint4(0, 0, 0, 0);
    }
    float acc[MR] = {};
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const F16x8 wf = to_f16(w[j]);
#pragma unroll
      for (int m = 0; m < MR; ++m) {
        F16x8 x = xs[j];
        if (m > 0) {
          const uint4 lo = xsh[m - 1][j][0][t], hi = xsh[m - 1][j][1][t];
          x = F16x8{{lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w}};
        }
        uint32_t h = hmul2_u(wf.f[0], x.f[0]);
#pragma unroll
        for (int i = 1; i < 8; ++i) h = hfma2_u(wf.f[i], x.f[i], h);
        const float2 v = f16x2_to_float2(h);
        acc[m] += v.x + v.y;
      }
    }
#pragma unroll
    for (int m = 0; m < MR; ++m) {
#pragma unroll
      for (int o = 16; o > 0; o /= 2) acc[m] += __shfl_xor_sync(0xFFFFFFFFu, acc[m], o);
      if (lane == 0) part[parity][m][warp] = acc[m];
    }
    __syncthreads();
    if (t < MR) {
      float sum = 0.0f;
#pragma unroll
      for (int q = 0; q < kRowsThreads / 32; ++q) sum += part[parity][t][q];
      float y = __fmul_rn(__fmul_rn(sum, 256.0f), __fmul_rn(sa, f));  // convert 7's steps, no FMA
      if (p.bias) y = __fadd_rn(y, bias);
      static_cast<OutT*>(p.out)[t * p.ldo + n] = from_float<OutT>(y);
    }
  };
  uint4 wa[V], wb[V];
  float fa = 0.0f, ba = 0.0f, fb = 0.0f, bb = 0.0f;
  int64_t n = blockIdx.x;  // < N: the grid is at most that
  load(n, wa, fa, ba);
  for (;;) {
    load(n + G, wb, fb, bb);
    finish(n, wa, fa, ba, 0);
    if ((n += G) >= p.N) break;
    load(n + G, wa, fa, ba);
    finish(n, wb, fb, bb, 1);
    if ((n += G) >= p.N) break;
  }
}

// Any layout (rows not 16-byte aligned, K % 16 != 0): a warp per weight row, lanes
// striding K with byte loads, fp32 sums reduced by shuffles. Correct, not fast.
template <typename OutT>
__global__ void skinny_gemm_bytes_kernel(SkinnyGemmParams p) {
  pdl_enter();
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (n >= p.N) return;
  const auto* b = static_cast<const uint8_t*>(p.b) + n * p.ldb;
  const float scale = *p.scale_a * p.scale_b[p.scale_b_per_channel ? n : 0];
  const float bias = p.bias ? to_float(static_cast<const OutT*>(p.bias)[n]) : 0.0f;
  for (int64_t m = blockIdx.y; m < p.M; m += gridDim.y) {
    const auto* a = static_cast<const uint8_t*>(p.a) + m * p.lda;
    float sum = 0.0f;
    for (int64_t k = lane; k < p.K; k += 32) sum += fp8_to_float(a[k]) * fp8_to_float(b[k]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
    if (lane == 0) static_cast<OutT*>(p.out)[m * p.ldo + n] = from_float<OutT>(sum * scale + bias);
  }
}

}  // namespace
