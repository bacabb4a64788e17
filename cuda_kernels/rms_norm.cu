// RMSNorm, fused residual-add + RMSNorm, and both with FP8 (e4m3fn) output, on NVIDIA
// GPUs (torch-free; rms_norm_torch.cpp checks the tensors).
//
// Five kernels; pick_layout says which runs where, with the H200 numbers.
//   * streaming (the fallback): one block of up to 1024 threads per row: pass 1 reads
//     the row (adds the residual and writes the rounded sum back, when fused) and
//     reduces the sum of squares in fp32; the next pass re-reads the row, which the
//     first left in L1/L2, and writes the output; dynamic FP8 adds a pass for the
//     row's absmax;
//   * split (row_split.cuh): a cluster of 2 to 8 blocks shares each row, every block a
//     slice in registers, and the sums meet by remote stores counted on mbarriers: 16-bit
//     hidden 16384 at every row count (the dynamic fp8 scale below 64-128 rows), and 8192
//     below 64-128 rows and from 512-1024 (pick_layout says which modes where);
//   * cluster (row_kernel.cuh): for a few long rows (<= 32 rows of >= 2048 vectors,
//     elsewhere than the split rows) a cluster of up to 8 blocks shares each row, held
//     in registers, so the row is pulled through 8 SMs, with a cluster barrier a
//     reduction: 2.97 us against 4.22 for add + RMSNorm + FP8 at 1 x 16384;
//   * flat (row_kernel.cuh): a block per row held in registers, one barrier a
//     reduction: hidden 4096, its exact-fit variant (fixed block size, no bounds
//     tests) for 16-bit hidden 2048, 4096 and 8192, which at 2048 and 4096 reads x (and
//     the residual) without allocating in L1 up to 32 MiB of x (ld_x, kXOnceBytes);
//   * piped (row_pipe.cuh): the flat layout in persistent blocks that keep the next row
//     on the way through shared memory: many rows of hidden 4104-16384; its exact-fit
//     variant (fixed block size, no bounds tests) at hidden 8192 where the flat exact
//     fit does not take them, and 16384 with the dynamic fp8 scale from 64-128 rows.
// Rows that are 16-byte aligned move in 16-byte vectors; any
// other row takes the scalar path, so every size and stride the checks accept is
// handled. Rounding matches the CPU backend and HF's LlamaRMSNorm (see
// cpu_kernels/rms_norm.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "block_reduce.cuh"
#include "ptx.cuh"
#include "row_kernel.cuh"
#include "row_pipe.cuh"
#include "row_split.cuh"
#include "fp8.h"
#include "gpu_launchers.h"
#include "vec_io.cuh"

namespace {

using inference_kernels::DType;
using inference_kernels::NormOut;
using inference_kernels::NormParams;
using namespace inference_kernels::cuda;

// y = round(round(a * inv_rms) * g), the normalised value in T, as a float.
template <typename T>
__device__ __forceinline__ float norm_value(T a, T g, float inv_rms) {
  return to_float(from_float<T>(to_float(from_float<T>(to_float(a) * inv_rms)) * to_float(g)));
}

// The elements of a 16-bit vector as fp32, a pair at a time.
template <typename T, int VEC>
__device__ __forceinline__ void unpack_vec(const Pack<T, VEC>& a, float (&f)[VEC]) {
  uint32_t u[VEC / 2];
  __builtin_memcpy(u, &a, sizeof u);
#pragma unroll
  for (int j = 0; j < VEC / 2; ++j) {
    const float2 x = Pair16<T>::unpack(u[j]);
    f[2 * j] = x.x, f[2 * j + 1] = x.y;
  }
}

// norm_value's two roundings for two 16-bit elements (x0, x1 as fp32; w: the weight
// pair's word): one packed cvt, then one packed multiply (Pair16::mul, the same bits);
// returns the pair of results as a word.
template <typename T>
__device__ __forceinline__ uint32_t norm_pair(float x0, float x1, uint32_t w, float inv_rms) {
  return Pair16<T>::mul(Pair16<T>::pack(x0 * inv_rms, x1 * inv_rms), w);
}

// from_float<T>(norm_value(...)) of a 16-bit vector (a: x as fp32), a pair at a time.
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> norm_vec16(const float (&a)[VEC], const Pack<T, VEC>& g, float inv_rms) {
  uint32_t gu[VEC / 2], y[VEC / 2];
  __builtin_memcpy(gu, &g, sizeof gu);
#pragma unroll
  for (int j = 0; j < VEC / 2; ++j) y[j] = norm_pair<T>(a[2 * j], a[2 * j + 1], gu[j], inv_rms);
  Pack<T, VEC> out;
  __builtin_memcpy(&out, y, sizeof y);
  return out;
}

// The fused ops' residual, x + residual rounded to T (the documented rounding: the
// rounded sum is what is stored and normalised); 16-bit pairs by one packed add each
// (Pair16::add, the same bits).
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> add_rounded(Pack<T, VEC> a, const Pack<T, VEC>& b) {
  if constexpr (sizeof(T) == 2 && VEC % 2 == 0) {
    uint32_t au[VEC / 2], bu[VEC / 2];
    __builtin_memcpy(au, &a, sizeof au);
    __builtin_memcpy(bu, &b, sizeof bu);
#pragma unroll
    for (int j = 0; j < VEC / 2; ++j) au[j] = Pair16<T>::add(au[j], bu[j]);
    __builtin_memcpy(&a, au, sizeof au);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) a.v[j] = from_float<T>(to_float(a.v[j]) + to_float(b.v[j]));
  }
  return a;
}

// norm_value of every element of a vector; 16-bit rows a pair at a time (norm_pair:
// norm_value's single cvts made the fp8 path of the split rows
// 552 instructions against the 16-bit output's 335, nvcc 13.0).
template <typename T, int VEC>
__device__ __forceinline__ void norm_values(const Pack<T, VEC>& a, const Pack<T, VEC>& g, float inv_rms,
                                            float (&y)[VEC]) {
  if constexpr (sizeof(T) == 2 && VEC % 2 == 0) {
    uint32_t au[VEC / 2], gu[VEC / 2];
    __builtin_memcpy(au, &a, sizeof au);
    __builtin_memcpy(gu, &g, sizeof gu);
#pragma unroll
    for (int j = 0; j < VEC / 2; ++j) {
      const float2 x = Pair16<T>::unpack(au[j]);
      const float2 v = Pair16<T>::unpack(norm_pair<T>(x.x, x.y, gu[j], inv_rms));
      y[2 * j] = v.x, y[2 * j + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) y[j] = norm_value(a.v[j], g.v[j], inv_rms);
  }
}

// fp8 bits of y * inv_scale for a vector of normalised values, a pair a cvt
// (cvt.rn.satfinite.e4m3x2 saturates to +-448 and keeps NaN: clamp_fp8's semantics, so
// the same bits as to_fp8 without the clamp's compares).
template <int VEC>
__device__ __forceinline__ Pack<uint8_t, VEC> quantise(const float (&y)[VEC], float inv_scale) {
  Pack<uint8_t, VEC> q;
  if constexpr (VEC % 2 == 0) {
    uint16_t pairs[VEC / 2];
#pragma unroll
    for (int j = 0; j < VEC / 2; ++j) {
      pairs[j] = __nv_cvt_float2_to_fp8x2(make_float2(y[2 * j] * inv_scale, y[2 * j + 1] * inv_scale),
                                          __NV_SATFINITE, __NV_E4M3);  // low byte: element 2j
    }
    __builtin_memcpy(&q, pairs, sizeof pairs);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) q.v[k] = to_fp8(y[k] * inv_scale);
  }
  return q;
}

// The row held in registers: ITEMS vectors a thread, in the layout of row_kernel.cuh.
// x and out may be the same row (rms_norm with out=x): every element is read before
// the same thread writes it, so neither pointer is __restrict__.
template <typename T, int VEC, int ITEMS, bool FUSED, NormOut MODE>
__global__ void __launch_bounds__(kRowThreads, 1) rms_norm_cached(NormParams p) {
  pdl_enter();
  using P = Pack<T, VEC>;
  // Issued first, and every load is ld_ordered (ptx.cuh): the scale's reciprocal (a
  // division with a slow path) waited for it before the row's loads went out.
  const float scale_in = MODE == NormOut::kFp8Static ? ld_ordered(p.scale) : 1.0f;
  const RowSlot s = row_slot();
  if (s.row >= p.rows) return;  // only in the warp-per-row layout: no barrier to miss
  const int nvec = static_cast<int>(p.d / VEC);
  const P* xr = reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + s.row * p.x.stride);
  P* rr = FUSED ? reinterpret_cast<P*>(static_cast<T*>(p.res.ptr) + s.row * p.res.stride) : nullptr;
  const P* w = reinterpret_cast<const P*>(p.weight);

  P a[ITEMS], g[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int i = s.first + k * s.step;
    if (i < nvec) {
      a[k] = ld_ordered(xr + i);
      if constexpr (FUSED) {
        const P b = ld_ordered(rr + i);
        a[k] = add_rounded(a[k], b);
      }
    }
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int i = s.first + k * s.step;
    if (i < nvec) {
      g[k] = ld_ordered(w + i);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float f = to_float(a[k].v[j]);
        sum_sq += f * f;
      }
    }
  }
  const float inv_rms = rsqrtf(row_reduce<Sum, 0>(sum_sq) / float(p.d) + p.eps);
  // The sum goes back after the reduction: a cluster barrier would wait for these
  // stores to drain (its release is a GPU-scope fence on sm_90).
  if constexpr (FUSED) {
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int i = s.first + k * s.step;
      if (i < nvec) rr[i] = a[k];
    }
  }

  if constexpr (MODE == NormOut::kSame) {
    P* orow = reinterpret_cast<P*>(static_cast<T*>(p.out.ptr) + s.row * p.out.stride);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int i = s.first + k * s.step;
      if (i < nvec) {
        P y;
#pragma unroll
        for (int j = 0; j < VEC; ++j) y.v[j] = from_float<T>(norm_value(a[k].v[j], g[k].v[j], inv_rms));
        orow[i] = y;
      }
    }
  } else {
    using Q = Pack<uint8_t, VEC>;
    Q* orow = reinterpret_cast<Q*>(static_cast<uint8_t*>(p.out.ptr) + s.row * p.out.stride);
    float scale_inv = MODE == NormOut::kFp8Static ? 1.0f / after_loads(scale_in) : 1.0f;
    if constexpr (MODE == NormOut::kFp8Dynamic) {
      float absmax = 0.0f;
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        if (s.first + k * s.step < nvec) {
          float y[VEC];
          norm_values(a[k], g[k], inv_rms, y);
#pragma unroll
          for (int j = 0; j < VEC; ++j) absmax = nan_max(absmax, fabsf(y[j]));
        }
      }
      const float scale = inference_kernels::dynamic_fp8_scale(row_reduce<Max, 1>(absmax));
      if (s.first == 0) p.row_scales[s.row] = scale;
      scale_inv = 1.0f / scale;
    }
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int i = s.first + k * s.step;
      if (i < nvec) {
        float y[VEC];
        norm_values(a[k], g[k], inv_rms, y);
        orow[i] = quantise<VEC>(y, scale_inv);
      }
    }
  }
  row_group_done();
}

// The output of a row held in registers (a: x, or x plus the residual; g: the weight):
// y in T, or its fp8 codes at the static scale or at the row's dynamic one. Thread t
// holds vectors t + k * step; in(i): vector i is in the row; row_max(v): the block's
// max of v (for the dynamic scale). With PAIRS, f holds a as fp32 and 16-bit y is
// rounded a pair at a time (norm_vec16).
template <typename T, int VEC, int ITEMS, NormOut MODE, bool PAIRS = false, typename Row, typename In, typename RowMax>
__device__ __forceinline__ void store_row_with(const NormParams& p, Row row, const Pack<T, VEC> (&a)[ITEMS],
                                               const Pack<T, VEC> (&g)[ITEMS], float inv_rms, float scale_in,
                                               int t, int step, In in, RowMax row_max,
                                               const float (*f)[VEC] = nullptr) {
  using P = Pack<T, VEC>;
  if constexpr (MODE == NormOut::kSame) {
    P* orow = reinterpret_cast<P*>(static_cast<T*>(p.out.ptr) + int64_t{row} * p.out.stride);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      if (in(t + k * step)) {
        if constexpr (PAIRS) {
          orow[t + k * step] = norm_vec16<T, VEC>(f[k], g[k], inv_rms);
        } else {
          P y;
#pragma unroll
          for (int j = 0; j < VEC; ++j) y.v[j] = from_float<T>(norm_value(a[k].v[j], g[k].v[j], inv_rms));
          orow[t + k * step] = y;
        }
      }
    }
  } else {
    using Q = Pack<uint8_t, VEC>;
    Q* orow = reinterpret_cast<Q*>(static_cast<uint8_t*>(p.out.ptr) + int64_t{row} * p.out.stride);
    float scale_inv = 1.0f / scale_in;
    if constexpr (MODE == NormOut::kFp8Dynamic) {
      float absmax = 0.0f;
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        if (in(t + k * step)) {
          float y[VEC];
          norm_values(a[k], g[k], inv_rms, y);
#pragma unroll
          for (int j = 0; j < VEC; ++j) absmax = nan_max(absmax, fabsf(y[j]));
        }
      }
      const float scale = inference_kernels::dynamic_fp8_scale(row_max(absmax));
      if (t == 0) p.row_scales[row] = scale;
      scale_inv = 1.0f / scale;
    }
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      if (in(t + k * step)) {
        float y[VEC];
        norm_values(a[k], g[k], inv_rms, y);
        orow[t + k * step] = quantise<VEC>(y, scale_inv);
      }
    }
  }
}

// store_row_with for the flat and piped layouts: blocks of any size, rows of any length.
// parity: the piped kernel's row parity (row_reduce_piped), 0 else.
template <typename T, int VEC, int ITEMS, NormOut MODE>
__device__ __forceinline__ void store_row(const NormParams& p, int64_t row, const Pack<T, VEC> (&a)[ITEMS],
                                          const Pack<T, VEC> (&g)[ITEMS], float inv_rms, float scale_in,
                                          int parity) {
  const int nvec = static_cast<int>(p.d / VEC);
  store_row_with<T, VEC, ITEMS, MODE>(
      p, row, a, g, inv_rms, scale_in, threadIdx.x, blockDim.x, [&](int i) { return i < nvec; },
      [&](float v) { return row_reduce_piped<Max, 1>(v, parity); });
}

// The flat layout (row_kernel.cuh): a block of tx threads per row, ITEMS vectors a
// thread, no cluster code. Everything the output needs is loaded before the
// reduction (x, the residual, the weight, the static scale), the rounded sum goes
// back before it too (no cluster fence to wait on here), and each reduction costs
// one barrier: the decode-latency candidate, after Liger's Triton kernel, whose SASS
// has the same shape. x and out may be the same row, as above.
template <typename T, int VEC, int ITEMS, bool FUSED, NormOut MODE>
__global__ void __launch_bounds__(kFlatThreads) rms_norm_flat(NormParams p) {
  pdl_enter();
  using P = Pack<T, VEC>;
  const float scale_in = MODE == NormOut::kFp8Static ? __ldg(p.scale) : 1.0f;
  const int64_t row = blockIdx.x;
  const int nvec = static_cast<int>(p.d / VEC);
  const int t = threadIdx.x, step = blockDim.x;
  const P* xr = reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + row * p.x.stride);
  P* rr = FUSED ? reinterpret_cast<P*>(static_cast<T*>(p.res.ptr) + row * p.res.stride) : nullptr;
  const P* w = reinterpret_cast<const P*>(p.weight);

  P a[ITEMS], g[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if (t + k * step < nvec) a[k] = xr[t + k * step];
  }
  if constexpr (FUSED) {
    P b[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      if (t + k * step < nvec) b[k] = rr[t + k * step];
    }
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      if (t + k * step < nvec) {
        a[k] = add_rounded(a[k], b[k]);
        rr[t + k * step] = a[k];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if (t + k * step < nvec) g[k] = w[t + k * step];
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if (t + k * step < nvec) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float f = to_float(a[k].v[j]);
        sum_sq += f * f;
      }
    }
  }
  const float inv_rms = rsqrtf(row_reduce_flat<Sum, 0>(sum_sq) / float(p.d) + p.eps);
  store_row<T, VEC, ITEMS, MODE>(p, row, a, g, inv_rms, scale_in, 0);
}

// The exact fits' row start (rms_norm_flat_exact, rms_norm_split_exact): this thread's
// ITEMS vectors of x at first + k * TX (plus the residual, the rounded sum written
// back) and its weight vectors.
template <typename T, int VEC, int ITEMS, int TX, bool FUSED, bool ONCE>
__device__ __forceinline__ void load_exact(const NormParams& p, int64_t row, int first, Pack<T, VEC> (&a)[ITEMS],
                                           Pack<T, VEC> (&g)[ITEMS]) {
  using P = Pack<T, VEC>;
  const P* xr = reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + row * p.x.stride) + first;
  P* rr = FUSED ? reinterpret_cast<P*>(static_cast<T*>(p.res.ptr) + row * p.res.stride) + first : nullptr;
  const P* w = reinterpret_cast<const P*>(p.weight) + first;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) a[k] = ld_x<ONCE>(xr + k * TX);
  if constexpr (FUSED) {
    P b[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) b[k] = ld_x<ONCE>(rr + k * TX);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      a[k] = add_rounded(a[k], b[k]);
      rr[k * TX] = a[k];
    }
  }
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) g[k] = w[k * TX];
}

// The sum of the squares of a's elements, with f their fp32 values.
template <typename T, int VEC, int ITEMS>
__device__ __forceinline__ float sum_squares(const Pack<T, VEC> (&a)[ITEMS], float (&f)[ITEMS][VEC]) {
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    unpack_vec(a[k], f[k]);
#pragma unroll
    for (int j = 0; j < VEC; ++j) sum_sq += f[k][j] * f[k][j];
  }
  return sum_sq;
}

// rms_norm_flat for 16-bit rows of exactly ITEMS x TX vectors (RowConfig::exact with
// stages 0; pick_layout's choice at 16-bit hidden 2048-8192), as layer_norm_flat_exact:
// no bounds test a vector, the block size and offsets fixed at compile time, the
// reduction without warp-count tests (row_reduce_fixed, the same tree), d a power of two
// (/ d an exact multiply), 16-bit output rounded a pair at a time. The same sums and
// roundings as rms_norm_flat: the same bits.
template <typename T, int VEC, int ITEMS, int TX, bool FUSED, NormOut MODE, bool ONCE = false>
__global__ void __launch_bounds__(TX) rms_norm_flat_exact(NormParams p) {
  pdl_enter();
  static_assert(sizeof(T) == 2, "16-bit rows only");
  using P = Pack<T, VEC>;
  constexpr float kD = float(ITEMS * TX * VEC);
  constexpr bool kPairs = MODE == NormOut::kSame;
  __shared__ float partial[2][2][TX / 32];  // [reduction][row parity: always 0 here][warp]
  const float scale_in = MODE == NormOut::kFp8Static ? __ldg(p.scale) : 1.0f;
  const int64_t row = blockIdx.x;
  const int t = threadIdx.x;
  P a[ITEMS], g[ITEMS];
  load_exact<T, VEC, ITEMS, TX, FUSED, ONCE>(p, row, t, a, g);
  float f[ITEMS][VEC];
  const float sum_sq = sum_squares(a, f);
  const float inv_rms = rsqrtf(row_reduce_fixed<Sum, TX>(sum_sq, partial[0], 0) / kD + p.eps);
  store_row_with<T, VEC, ITEMS, MODE, kPairs>(
      p, row, a, g, inv_rms, scale_in, t, TX, [](int) { return true; },
      [&pmax = partial[1]](float v) { return row_reduce_fixed<Max, TX>(v, pmax, 0); }, f);
}

// The split layout (row_split.cuh): a cluster of CL blocks a row, each holding a
// contiguous slice of ITEMS x TX vectors (16-bit rows of exactly CL x ITEMS x TX
// vectors), as rms_norm_flat_exact otherwise. The sum of squares runs in another order
// (each block's tree, then the ranks in order), so outputs may differ from the other
// layouts in the last bit; the residual's rounded sum is the same.
template <typename T, int VEC, int ITEMS, int TX, int CL, bool FUSED, NormOut MODE>
__global__ void __launch_bounds__(TX) rms_norm_split_exact(NormParams p) {
  pdl_enter();
  static_assert(sizeof(T) == 2, "16-bit rows only");
  using P = Pack<T, VEC>;
  constexpr float kD = float(CL * ITEMS * TX * VEC);
  constexpr bool kPairs = MODE == NormOut::kSame;
  __shared__ SplitRow<TX, CL, 2> s;
  const float scale_in = MODE == NormOut::kFp8Static ? __ldg(p.scale) : 1.0f;
  const unsigned rank = cluster_rank();
  const int64_t row = blockIdx.x / CL;
  const int first = static_cast<int>(rank) * ITEMS * TX + static_cast<int>(threadIdx.x);
  P a[ITEMS], g[ITEMS];
  load_exact<T, VEC, ITEMS, TX, FUSED, false>(p, row, first, a, g);
  split_start(s);
  float f[ITEMS][VEC];
  const float sum_sq = sum_squares(a, f);
  const float inv_rms = rsqrtf(split_reduce<Sum>(s, 0, sum_sq, rank) / kD + p.eps);
  store_row_with<T, VEC, ITEMS, MODE, kPairs>(
      p, row, a, g, inv_rms, scale_in, first, TX, [](int) { return true; },
      [&ss = s, rank](float v) { return split_reduce<Max>(ss, 1, v, rank); }, f);
}

// The piped layout (row_pipe.cuh): the flat kernel's rows, in persistent blocks that
// keep the next stages - 1 rows (x, and the residual) on the way through shared
// memory; the weight is loaded once a block. x and out may be the same row, as above:
// the rows in flight are later rows.
template <typename T, int VEC, int ITEMS, bool FUSED, NormOut MODE>
__global__ void __launch_bounds__(piped_threads(ITEMS)) rms_norm_piped(NormParams p, int stages) {
  pdl_enter();
  using P = Pack<T, VEC>;
  constexpr int kArrays = FUSED ? 2 : 1;
  extern __shared__ uint4 ring_smem[];
  const int nvec = static_cast<int>(p.d / VEC);
  const int t = threadIdx.x, step = blockDim.x;
  const RowRing<kArrays> ring(ring_smem, nvec, stages);
  auto fetch = [&](int64_t row, int stage) {
    const int64_t r = row < p.rows ? row : 0;
    const P* src[kArrays];
    src[0] = reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + r * p.x.stride);
    if constexpr (FUSED) src[kArrays - 1] = reinterpret_cast<const P*>(static_cast<const T*>(p.res.ptr) + r * p.res.stride);
    ring.template fetch<ITEMS>(stage, src, row < p.rows);
  };
  int64_t row = blockIdx.x;
  for (int s = 0; s + 1 < stages; ++s) fetch(row + int64_t{s} * gridDim.x, s);
  const float scale_in = MODE == NormOut::kFp8Static ? __ldg(p.scale) : 1.0f;
  const P* w = reinterpret_cast<const P*>(p.weight);
  P g[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if (t + k * step < nvec) g[k] = w[t + k * step];
  }
  int stage = 0, next = stages - 1;
  for (int parity = 0; row < p.rows; row += gridDim.x, parity ^= 1) {
    fetch(row + int64_t{stages - 1} * gridDim.x, next);
    ring.wait();
    P a[ITEMS];
    P* rr = FUSED ? reinterpret_cast<P*>(static_cast<T*>(p.res.ptr) + row * p.res.stride) : nullptr;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      if (t + k * step < nvec) {
        a[k] = ring.template read<P>(stage, 0, k);
        if constexpr (FUSED) {
          const P b = ring.template read<P>(stage, 1, k);
          a[k] = add_rounded(a[k], b);
          rr[t + k * step] = a[k];
        }
      }
    }
    float sum_sq = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      if (t + k * step < nvec) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float f = to_float(a[k].v[j]);
          sum_sq += f * f;
        }
      }
    }
    const float inv_rms = rsqrtf(row_reduce_piped<Sum, 0>(sum_sq, parity) / float(p.d) + p.eps);
    store_row<T, VEC, ITEMS, MODE>(p, row, a, g, inv_rms, scale_in, parity);
    stage = stage + 1 == stages ? 0 : stage + 1;
    next = next + 1 == stages ? 0 : next + 1;
  }
  cp_async_wait<0>();
}

// rms_norm_piped for rows of exactly ITEMS x kTx vectors (kTx = piped_threads(ITEMS)
// threads) and a ring of 2 stages, 16-bit only (RowConfig::exact; pick_layout's choice for
// hidden 8192 and 16384; fp32 rows were never measured with it and keep rms_norm_piped).
// Everything rms_norm_piped decides at run time is fixed here: no bounds test a vector,
// compile-time block size and ring offsets (immediates), the stage is the row's
// parity, and the reduction has no warp-count tests. d = ITEMS x kTx x VEC is a power
// of two, so the mean's division is an exact multiply; 16-bit output is rounded a pair
// at a time (norm_vec16). The same sums in the same order and the same roundings as
// rms_norm_piped, so the same bits by construction (the layout sweep's check, at most 2
// ulps apart and the residual bit for bit, flagged none). 2 blocks an SM at 2 vectors a
// thread (registers capped at 64), as rms_norm_piped's 56 registers give.
template <typename T, int VEC, int ITEMS, bool FUSED, NormOut MODE>
__global__ void __launch_bounds__(piped_threads(ITEMS), ITEMS == 2 ? 2 : 1)
    rms_norm_piped_exact(NormParams p, int /*stages: 2*/) {
  pdl_enter();
  static_assert(sizeof(T) == 2, "16-bit rows only");
  using P = Pack<T, VEC>;
  constexpr int kTx = piped_threads(ITEMS), kNvec = ITEMS * kTx, kArrays = FUSED ? 2 : 1;
  constexpr float kD = float(kNvec * VEC);
  constexpr bool kPairs = MODE == NormOut::kSame;
  extern __shared__ uint4 ring_smem[];
  __shared__ float partial[2][2][kTx / 32];  // [reduction][row parity][warp]
  const int t = threadIdx.x;
  const FixedRing<kArrays, ITEMS, kTx> ring(ring_smem);
  // Row indices as 32-bit unsigned: rows <= INT32_MAX (rms_norm_launch_with), so row +
  // gridDim.x cannot wrap.
  const unsigned rows = static_cast<unsigned>(p.rows);
  auto fetch = [&](unsigned row, int stage) {
    const int64_t r = row < rows ? row : 0;
    const P* src[kArrays];
    src[0] = reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + r * p.x.stride);
    if constexpr (FUSED) src[kArrays - 1] = reinterpret_cast<const P*>(static_cast<const T*>(p.res.ptr) + r * p.res.stride);
    ring.fetch(stage, src, row < rows);
  };
  unsigned row = blockIdx.x;
  fetch(row, 0);
  const float scale_in = MODE == NormOut::kFp8Static ? __ldg(p.scale) : 1.0f;
  const P* w = reinterpret_cast<const P*>(p.weight);
  P g[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) g[k] = w[t + k * kTx];
  for (int parity = 0; row < rows; row += gridDim.x, parity ^= 1) {
    fetch(row + gridDim.x, parity ^ 1);
    cp_async_wait<1>();
    P a[ITEMS];
    float f[ITEMS][VEC];
    P* rr = FUSED ? reinterpret_cast<P*>(static_cast<T*>(p.res.ptr) + int64_t{row} * p.res.stride) : nullptr;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      a[k] = ring.template read<P>(parity, 0, k);
      if constexpr (FUSED) {
        const P b = ring.template read<P>(parity, 1, k);
        a[k] = add_rounded(a[k], b);
        rr[t + k * kTx] = a[k];
      }
      unpack_vec(a[k], f[k]);
    }
    float sum_sq = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) sum_sq += f[k][j] * f[k][j];
    }
    const float inv_rms = rsqrtf(row_reduce_fixed<Sum, kTx>(sum_sq, partial[0], parity) / kD + p.eps);
    store_row_with<T, VEC, ITEMS, MODE, kPairs>(
        p, row, a, g, inv_rms, scale_in, t, kTx, [](int) { return true; },
        [&pmax = partial[1], parity](float v) { return row_reduce_fixed<Max, kTx>(v, pmax, parity); }, f);
  }
  cp_async_wait<0>();
}

// Rows too long to cache: one block per row, the row streamed twice (thrice for
// dynamic fp8). x and out may be the same row, as above.
template <typename T, int VEC, bool FUSED, NormOut MODE>
__global__ void rms_norm_kernel(NormParams p) {
  pdl_enter();
  using P = Pack<T, VEC>;
  const int64_t row = blockIdx.x;
  const P* xr = reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + row * p.x.stride);
  P* rr = FUSED ? reinterpret_cast<P*>(static_cast<T*>(p.res.ptr) + row * p.res.stride) : nullptr;
  const P* w = reinterpret_cast<const P*>(p.weight);
  const int64_t nvec = p.d / VEC;
  // Loads the output pass needs, issued now so their latency hides under pass 1 and
  // the reduction rather than following it (decode rows are latency-bound): the
  // static scale, and the weight of each thread's first vector (a row of up to
  // blockDim vectors has no other).
  const float scale_in = MODE == NormOut::kFp8Static ? __ldg(p.scale) : 1.0f;
  P g0;
  if (threadIdx.x < nvec) g0 = w[threadIdx.x];

  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
    P a = xr[i];
    if constexpr (FUSED) {
      const P b = rr[i];
      a = add_rounded(a, b);
      rr[i] = a;
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float f = to_float(a.v[k]);
      sum_sq += f * f;
    }
  }
  const float inv_rms = rsqrtf(block_reduce<Sum>(sum_sq) / float(p.d) + p.eps);
  const P* src = FUSED ? rr : xr;

  if constexpr (MODE == NormOut::kSame) {
    P* orow = reinterpret_cast<P*>(static_cast<T*>(p.out.ptr) + row * p.out.stride);
    for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
      const P a = src[i], g = i == threadIdx.x ? g0 : w[i];
      P y;
#pragma unroll
      for (int k = 0; k < VEC; ++k) y.v[k] = from_float<T>(norm_value(a.v[k], g.v[k], inv_rms));
      orow[i] = y;
    }
  } else {
    float inv_scale;
    if constexpr (MODE == NormOut::kFp8Static) {
      inv_scale = 1.0f / scale_in;
    } else {
      float absmax = 0.0f;
      for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
        const P a = src[i], g = i == threadIdx.x ? g0 : w[i];
        float y[VEC];
        norm_values(a, g, inv_rms, y);
#pragma unroll
        for (int k = 0; k < VEC; ++k) absmax = nan_max(absmax, fabsf(y[k]));
      }
      const float scale = inference_kernels::dynamic_fp8_scale(block_reduce<Max>(absmax));
      if (threadIdx.x == 0) p.row_scales[row] = scale;
      inv_scale = 1.0f / scale;
    }
    using Q = Pack<uint8_t, VEC>;
    Q* orow = reinterpret_cast<Q*>(static_cast<uint8_t*>(p.out.ptr) + row * p.out.stride);
    for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
      const P a = src[i], g = i == threadIdx.x ? g0 : w[i];
      float y[VEC];
      norm_values(a, g, inv_rms, y);
      orow[i] = quantise<VEC>(y, inv_scale);
    }
  }
}

template <typename T, int VEC, bool FUSED, NormOut MODE>
cudaError_t launch_piped_rows(const NormParams& p, const RowConfig& c, cudaStream_t stream) {
  if constexpr (sizeof(T) * VEC != 16) {
    return cudaErrorInvalidConfiguration;  // the ring moves 16-byte vectors
  } else {
    const int64_t nvec = p.d / VEC;
    const int arrays = FUSED ? 2 : 1;
    if (c.tx > piped_threads(c.items)) return cudaErrorInvalidConfiguration;
    if (c.exact) {
      if constexpr (sizeof(T) != 2) {
        return cudaErrorInvalidConfiguration;
      } else {
        if (c.stages != 2 || c.tx != piped_threads(c.items) || int64_t{c.tx} * c.items != nvec) {
          return cudaErrorInvalidConfiguration;
        }
        switch (c.items) {
          case 2: return launch_piped(rms_norm_piped_exact<T, VEC, 2, FUSED, MODE>, p, c, p.rows, nvec, arrays, stream);
          case 4: return launch_piped(rms_norm_piped_exact<T, VEC, 4, FUSED, MODE>, p, c, p.rows, nvec, arrays, stream);
          default: return cudaErrorInvalidConfiguration;
        }
      }
    }
    switch (c.items) {
      case 2: return launch_piped(rms_norm_piped<T, VEC, 2, FUSED, MODE>, p, c, p.rows, nvec, arrays, stream);
      case 4: return launch_piped(rms_norm_piped<T, VEC, 4, FUSED, MODE>, p, c, p.rows, nvec, arrays, stream);
      case 8: return launch_piped(rms_norm_piped<T, VEC, 8, FUSED, MODE>, p, c, p.rows, nvec, arrays, stream);
      default: return cudaErrorInvalidConfiguration;
    }
  }
}

// The split exact fits (RowConfig::exact with cluster > 1, stages 0) the launcher
// instantiates: 2 vectors a thread, hidden 16384 in 16-bit (2048 vectors) as 4 blocks of
// 256 threads or 8 of 128, hidden 8192 as 2 of 256 or 4 of 128 (8 of 64 measured slower
// from 256 rows, at most 0.04 us faster below), for every mode. The dynamic scale
// exchanges twice (the sum of squares, then the row's absmax).
template <typename T, int VEC, bool FUSED, NormOut MODE>
cudaError_t launch_split(const NormParams& p, const RowConfig& c, cudaStream_t stream) {
  if (c.stages != 0 || c.items != 2 || c.rows_per_block != 1 || int64_t{c.tx} * c.items * c.cluster != p.d / VEC) {
    return cudaErrorInvalidConfiguration;
  }
  if (c.cluster == 4 && c.tx == 256) return launch_rows(rms_norm_split_exact<T, VEC, 2, 256, 4, FUSED, MODE>, p, c, p.rows, stream);
  if (c.cluster == 8 && c.tx == 128) return launch_rows(rms_norm_split_exact<T, VEC, 2, 128, 8, FUSED, MODE>, p, c, p.rows, stream);
  if (c.cluster == 2 && c.tx == 256) return launch_rows(rms_norm_split_exact<T, VEC, 2, 256, 2, FUSED, MODE>, p, c, p.rows, stream);
  if (c.cluster == 4 && c.tx == 128) return launch_rows(rms_norm_split_exact<T, VEC, 2, 128, 4, FUSED, MODE>, p, c, p.rows, stream);
  return cudaErrorInvalidConfiguration;
}

template <typename T, int VEC, bool FUSED, NormOut MODE>
cudaError_t launch_flat(const NormParams& p, const RowConfig& c, cudaStream_t stream) {
  if (c.stages > 0) return launch_piped_rows<T, VEC, FUSED, MODE>(p, c, stream);
  if (c.exact) {
    if constexpr (sizeof(T) != 2 || sizeof(T) * VEC != 16) {
      return cudaErrorInvalidConfiguration;
    } else {
      if (c.cluster > 1) return launch_split<T, VEC, FUSED, MODE>(p, c, stream);
      if (int64_t{c.tx} * c.items != p.d / VEC) return cudaErrorInvalidConfiguration;
      // 2 vectors a thread: 128 x 4 measured no faster at hidden 4096 (1.55 against 1.51
      // us at 1 x 4096 bf16, 18.38 against 18.18 at 4096 x 4096; 3.91 against 3.93 with
      // the residual at 256).
      if (c.items != 2) return cudaErrorInvalidConfiguration;
      // x without L1 up to 32 MiB (kXOnceBytes) at rows of up to 512 vectors, the widths
      // measured (hidden 4096 and 2048; at 4096 x 4096 bf16 5% faster).
      return with_block_size<128, 256, 512, 1024>(c.tx, [&](auto tx) {
        constexpr int kTx = decltype(tx)::value;
        return with_once(p.rows * p.d * int64_t{sizeof(T)} <= kXOnceBytes, [&](auto o) {
          return launch_rows(rms_norm_flat_exact<T, VEC, 2, kTx, FUSED, MODE, decltype(o)::value && 2 * kTx <= 512>, p,
                             c, p.rows, stream);
        });
      });
    }
  }
  switch (c.items) {
    case 1: return launch_rows(rms_norm_flat<T, VEC, 1, FUSED, MODE>, p, c, p.rows, stream);
    case 2: return launch_rows(rms_norm_flat<T, VEC, 2, FUSED, MODE>, p, c, p.rows, stream);
    case 4: return launch_rows(rms_norm_flat<T, VEC, 4, FUSED, MODE>, p, c, p.rows, stream);
    default: return cudaErrorInvalidConfiguration;
  }
}

template <typename T, int VEC, bool FUSED, NormOut MODE>
cudaError_t launch_cached(const NormParams& p, const RowConfig& c, cudaStream_t stream) {
  if (c.flat) return launch_flat<T, VEC, FUSED, MODE>(p, c, stream);
  switch (c.items) {
    case 1: return launch_rows(rms_norm_cached<T, VEC, 1, FUSED, MODE>, p, c, p.rows, stream);
    case 2: return launch_rows(rms_norm_cached<T, VEC, 2, FUSED, MODE>, p, c, p.rows, stream);
    case 4: return launch_rows(rms_norm_cached<T, VEC, 4, FUSED, MODE>, p, c, p.rows, stream);
    case 8: return launch_rows(rms_norm_cached<T, VEC, 8, FUSED, MODE>, p, c, p.rows, stream);
    default: return cudaErrorInvalidConfiguration;
  }
}

// The layout for rows of nvec vectors (H200, tune_norms, BENCHMARKS.md):
// - 16-bit rows of exactly 2048 vectors (hidden 16384), every mode but the dynamic
//   scale (below), at every row count: the split rows (rms_norm_split_exact; thirty-second
//   session, against the layouts below, which it replaced there): 8 blocks of 128
//   threads a row, except RMSNorm alone from 128 rows, 4 of 256. bf16 RMSNorm 1.64
//   against 2.66 us at 1 row, 3.07 against 3.49 at 64, 4.08 against 4.37 at 128, 17.77
//   against 19.06 at 1024, 65.54 against 66.34 at 4096; with the residual 1.87 against
//   3.01 at 1 row, 34.65 against 35.60 at 1024, 131.55 against 133.54 at 4096; fp16 with
//   the residual and static fp8 2.00 against 2.97 at 1 row, 16.40 against 17.16 at 512,
//   31.76 against 33.80 at 1024, 60.04 against 61.21 at 2048. Static fp8 without the
//   residual takes the same rule unmeasured;
// - the dynamic fp8 scale, 16-bit rows of exactly 2048 or 1024 vectors: the split rows
//   (8 or 4 blocks of 128 threads a row; two exchanges, the sum of squares and the
//   absmax) below 128 rows of 2048 with the residual, else below 64 (fifty-fourth
//   session, tune_norms on an H100 (no H200 was lent), fp16, against the layouts they
//   replaced there, the cluster layout below 32 rows of 2048, else the piped fit at 2048
//   and the flat exact fit at 1024): with the residual at 16384, 2.40 against 4.66 us at
//   1 row, 2.67 against 4.95 at 8, 3.45 against 5.92 at 16, 4.07 against 4.96 at 32,
//   5.28 against 5.77 at 64, 6.52 against 6.89 at 96; without it 2.23 against 4.60 at 1
//   row, 3.19 against 3.92 at 32 (5.63 against 5.09 at 128: slower; 64 unmeasured); at
//   8192, 2.26 against 2.55 at 1 row, 3.34 against 3.45 at 32, level at 64 (3.90 against
//   3.91), slower at 128 (5.11 against 5.05); without the residual 2.13 against 2.33 at 1
//   row, 2.39 against 2.57 at 32, slower at 128 (3.65 against 3.58). From 128 rows of
//   16384 with the residual the split was 1-7% faster on that H100 (81.03 against 86.70
//   us at 2048), but 3% slower on the H200 at 2048 (thirty-second session: 68.95 against
//   66.95), so the rule stops there;
// - 16-bit rows of exactly 1024 vectors (hidden 8192): the split rows too (4 blocks of
//   128 a row; RMSNorm alone from 768 rows, 2 of 256) below 128 rows, and
//   * 16-bit output: from 768 rows alone, from 512 with the residual (thirty-second
//     session, bf16, against the flat exact fit: 1.59 against 1.83 us at 1 row, 1.66
//     against 1.97 at 16, 34.21 against 34.56 at 4096; with the residual 1.80 against
//     2.11 at 1 row, 66.64 against 67.78 at 4096; fortieth session, s40b: 7.16 against
//     7.43-7.47 at 768 alone; with the residual 9.49-9.53 against 9.78-9.82 at 512,
//     13.08-13.10 against 13.79-13.86 at 768). At 256 rows they were slower (3.89
//     against 3.83 us alone, 5.96 against 5.88 with the residual), and at 384 (7.83
//     against 7.72 with the residual) and 512 alone (5.32 against 5.18);
//   * static fp8 (s40b, fp16): from 1024 rows with the residual only. With it, 1.84
//     against 2.11 us at 1 row, 1.87 against 2.21 at 8, 2.88 against 2.97 at 32, 15.88
//     against 16.51 at 1024, 30.74 against 31.44 at 2048; level or slower at 128-512 (4.09
//     against 4.01 at 128). Without it 1.62 against 1.74 at 1 row, 1.84 against 1.93 at
//     32; from 1024 rows 4 blocks were slower (9.64 against 8.00) and 2 of 256 level
//     (7.92), so it keeps the rules below there;
// - more than 256 rows of 513-2048 16-byte vectors (hidden 4104-16384 in 16-bit), every
//   mode: the piped layout, one row ahead (2 stages; 3 and 4 measured slower), 2
//   vectors a thread up to 1024 vectors, else 4: 37.94 against 50.23 us streaming at
//   4096 x 8192 bf16, 72.71 against 84.64 at 4096 x 16384; with residual and fp8 at
//   hidden 16384 fp16, 18.50 against 20.55 us at 512 rows, 72.38 against 81.98 with
//   the dynamic scale at 2048 (66.21 against 67.09 static);
// - rows of exactly 1024 or 2048 16-bit vectors (hidden 8192 and 16384): the piped
//   layout's exact fit (rms_norm_piped_exact, 512 threads of 2 or 4 vectors), which
//   halves the instructions a row: 35.85 against 37.33 us at 4096 x 8192 bf16, 3.82
//   against 4.76 (streaming) at 256 x 8192, 3.36 against 4.13 (cluster) at 32 x 16384,
//   2.04 against 2.50 (streaming) at 1 x 8192; with residual and fp8, 63.36 against
//   65.85 us at 2048 x 16384 fp16, 17.37 against 18.69 at 512, 66.64 against 72.41 with
//   the dynamic scale; the one measured loss, within 2%: 4.78 against 4.71 us (cluster)
//   with fp8 at 32 x 16384. Below 32 rows of 2048 vectors the cluster layout stays for
//   the fused and fp8 kernels (3.02 against 3.42 us, add + RMSNorm at 1 x 16384). Below
//   32 rows of 1024 vectors it beat streaming in every measured mode (2.40 against 2.77
//   us, add + RMSNorm at 1 x 8192); fp8 there is unmeasured and takes it too. fp32 is
//   unmeasured and keeps the rules below;
// - 16-bit rows of exactly 512 vectors (hidden 4096), 16-bit output: the flat layout's
//   exact fit, 256 threads of 2 vectors (rms_norm_flat_exact). tune_norms on the H200,
//   tenth session, bf16, against the plain flat layout (the default before): 1.52
//   against 1.87 us at 1 x 4096, 2.84 against 3.24 at 256 rows, 17.99 against 19.66 at
//   4096. With the residual up to 512 rows, against streaming: 1.70 against 2.20 us at
//   1 row, 3.88 against 4.46 at 256, 5.64 against 6.50 at 512; level at 1024 and 2048
//   (9.76 against 9.67, 18.33 against 18.38), behind at 4096 (35.53 against 34.86). The
//   same at 256 vectors (hidden 2048, 128 threads): 1.39 against 1.77 us streaming at
//   1 row, 9.19 against 10.68 at 4096 rows; with the residual 1.53 against 1.92 at 1
//   row, 2.93 against 3.36 at 256 (17.82 against 18.06 at 4096: level, streams). With
//   fp8 output at hidden 4096 (fp16; outputs within tune_norms' 2-ulp check): static with
//   the residual up to 512 rows, 1.88 against 2.22 us streaming at 1 row, 4.10 against
//   4.63 at 256, 5.98 against 6.81 at 512 (31.51 against 31.35 at 4096: level,
//   streams); static without the residual, and the dynamic scale, at every row count:
//   1.66 against 2.05 us at 1 row, 2.97 against 3.53 at 256, 16.05 against 25.15 at
//   4096 (static); 2.35 against 2.92, 4.80 against 5.75, 32.79 against 41.23 (dynamic,
//   with the residual; without it unmeasured). bf16 input takes the same rules
//   (unmeasured with fp8 output); fp8 at hidden 2048 is unmeasured and keeps the rules
//   below;
// - the same fit at 2 vectors a thread over 512 threads (hidden 8192) and 1024 threads
//   (hidden 16384: a whole block a row, 2 blocks an SM, Liger's shape; at 16384 the split
//   rows replaced it, and the piped fit, in the thirty-second session), 16-bit output,
//   eleventh session (tune_norms, bf16, against the piped exact fit, the default before):
//   at 8192 with and without the residual at every row count, 1.82 against 2.04 us at
//   1 row, 3.80 against 3.81 at 256, 34.55 against 36.28 at 4096 (alone); 2.12 against
//   2.40, 5.88 against 5.99, 67.68 against 70.11 (with the residual); at 16384 from 1024
//   rows: 19.18 against 19.47 us at 1024 rows and 66.31 against 70.92 at 4096 (alone),
//   35.77 against 36.46 and 132.78 against 139.54 (residual), but behind at 256 and 512
//   rows (5.73 against 5.55 us alone at 256, 9.95 against 9.59 at 512); with static fp8
//   and the residual (fp16) from 2048 rows: 60.87 against 64.40 us there, 33.63 against
//   33.06 at 1024; twelfth session (fp16, against the piped exact fit): every fp8 mode at
//   8192, 2.47 against 2.62 us at 1 row, 6.27 against 6.51 at 256, 59.85 against 64.71
//   at 4096 (static, residual); 2.06 against 2.33, 4.15 against 4.32, 30.70 against 31.18
//   (static, no residual); 3.14 against 3.16, 7.41 against 7.50, 60.64 against 66.18
//   (dynamic, residual; without it unmeasured, and it takes the fit too); static fp8 with
//   the residual at 16384 from 32 to 128 rows, 4.47 against 4.72 us at 32, 5.04 against
//   5.22 at 64, 6.64 against 6.89 at 128 (behind at 256: 10.46 against 9.94); the dynamic
//   scale at 16384 stays piped (43.37 against 36.67 us at 1024 rows, 151.20 against
//   124.22 at 4096) where it does not split, and below 32 rows of 16384 every fp8 mode
//   is unmeasured and keeps the rules below;
// - RMSNorm alone (no residual, no fp8) over other rows of 257-512 vectors (hidden 4096
//   in 16-bit): the flat layout, 256 threads of 2 vectors (1.87 against 2.02 us at 1 x
//   4096 bf16, 19.97 against 23.54 us at 4096 x 4096; the fused and fp8 kernels
//   measured faster as they were, piped included);
// - up to 32 long rows (>= 2048 vectors): the cluster layout (see the top of the file);
// - else streaming.
inline RowConfig pick_layout(int64_t rows, int64_t nvec, bool fused, NormOut mode, bool vec16, bool half) {
  const bool plain = !fused && mode == NormOut::kSame;
  const bool wide = nvec == 1024;
  const bool flat_exact = mode == NormOut::kSame ? ((nvec == 256 || nvec == 512) && (!fused || rows <= 512)) || wide
                          : mode == NormOut::kFp8Static && fused
                              ? (nvec == 512 && rows <= 512) || nvec == 1024
                              : nvec == 512 || nvec == 1024;
  RowConfig c;
  c.items = 0;
  // The dynamic scale's split rows: below 128 rows of 16384 with the residual, else 64.
  const bool dynamic = mode == NormOut::kFp8Dynamic;
  const int64_t dynamic_split_rows = nvec == 2048 && fused ? 128 : 64;
  // At hidden 8192 only where it measured faster (the rule's comment above).
  const bool split8192 =
      nvec == 1024 && (mode == NormOut::kSame ? rows < 128 || rows >= (fused ? 512 : 768)
                       : mode == NormOut::kFp8Static ? rows < 128 || (fused && rows >= 1024)
                                                     : rows < dynamic_split_rows);
  if (vec16 && half && (nvec == 2048 || split8192) && (!dynamic || rows < dynamic_split_rows)) {
    // Slices of 8 KB (256 threads x 2) for RMSNorm alone from 128 rows, else 4 KB.
    const bool wide_slice = plain && rows >= 128;
    c.flat = true;
    c.exact = true;
    c.tx = wide_slice ? 256 : 128;
    c.items = 2;
    c.cluster = static_cast<int>(nvec / (c.tx * 2));
    return c;
  }
  if (vec16 && half && flat_exact) {
    c.flat = true;
    c.exact = true;
    c.tx = static_cast<int>(nvec / 2);
    c.items = 2;
    return c;
  }
  if (vec16 && half && (rows >= 32 || plain || nvec < 2048)) {
    for (int items : {2, 4}) {
      if (int64_t{items} * piped_threads(items) != nvec) continue;
      c.flat = true;
      c.stages = 2;
      c.exact = true;
      c.items = items;
      c.tx = piped_threads(items);
      return c;
    }
  }
  if (vec16 && rows > 256 && nvec > 512 && nvec <= 2048) {
    c.flat = true;
    c.stages = 2;
    c.items = nvec <= 1024 ? 2 : 4;
    c.tx = round_up((nvec + c.items - 1) / c.items, 32);
    return c;
  }
  if (plain && nvec > 256 && nvec <= 512) {
    c.flat = true;
    c.tx = 256;
    c.items = 2;
    return c;
  }
  if (rows > 32 || nvec < 2048) return c;
  c.cluster = kMaxCluster;
  c.items = 1;
  while (c.items < 4 && (nvec + c.cluster * c.items - 1) / (c.cluster * c.items) > kRowThreads) c.items *= 2;
  const int64_t per_thread_row = (nvec + c.cluster * c.items - 1) / (c.cluster * c.items);
  if (per_thread_row > kRowThreads) c.items = 0;  // too long: stream
  c.tx = round_up(per_thread_row, 32);
  return c;
}

template <typename T, int VEC, bool FUSED, NormOut MODE>
cudaError_t launch_width(const NormParams& p, const RowConfig* forced, cudaStream_t stream) {
  const int64_t nvec = p.d / VEC;
  RowConfig c = forced ? *forced : pick_layout(p.rows, nvec, FUSED, MODE, sizeof(T) * VEC == 16, sizeof(T) == 2);
  if (c.items > 0 && !fits(c, p.rows, nvec)) {
    if (forced) return cudaErrorInvalidConfiguration;
    c.items = 0;
  }
  if (c.items > 0) return launch_cached<T, VEC, FUSED, MODE>(p, c, stream);
  const int threads = static_cast<int>(std::min<int64_t>(kMaxThreads, (nvec + 31) / 32 * 32));
  return launch_kernel({dim3(static_cast<unsigned>(p.rows)), dim3(threads), 0, stream},
                       rms_norm_kernel<T, VEC, FUSED, MODE>, p);
}

template <typename T, bool FUSED, NormOut MODE>
cudaError_t launch(const NormParams& p, const RowConfig* forced, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kOutBytes = MODE == NormOut::kSame ? 16 : kVec;  // fp8: one byte an element
  const bool vec = p.d % kVec == 0 && p.out.stride % kVec == 0 && p.x.stride % kVec == 0 &&
                   (!FUSED || p.res.stride % kVec == 0) && aligned(p.out.ptr, kOutBytes) &&
                   aligned(p.x.ptr, 16) && (!FUSED || aligned(p.res.ptr, 16)) &&
                   aligned(p.weight, 16);
  return vec ? launch_width<T, kVec, FUSED, MODE>(p, forced, stream)
             : launch_width<T, 1, FUSED, MODE>(p, forced, stream);
}

template <typename T, NormOut MODE>
cudaError_t launch_fused_or_not(const NormParams& p, const RowConfig* forced, cudaStream_t stream) {
  return p.res.ptr ? launch<T, true, MODE>(p, forced, stream) : launch<T, false, MODE>(p, forced, stream);
}

template <typename T>
cudaError_t launch_mode(const NormParams& p, const RowConfig* forced, cudaStream_t stream) {
  switch (p.mode) {
    case NormOut::kSame: return launch_fused_or_not<T, NormOut::kSame>(p, forced, stream);
    case NormOut::kFp8Static: return launch_fused_or_not<T, NormOut::kFp8Static>(p, forced, stream);
    case NormOut::kFp8Dynamic: return launch_fused_or_not<T, NormOut::kFp8Dynamic>(p, forced, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

namespace inference_kernels {

// forced: a layout to use instead of pick_layout's (benchmarks/tune_norms.cu), or null.
int rms_norm_launch_with(const NormParams& p, const cuda::RowConfig* forced, void* stream) {
  if (p.rows <= 0 || p.d <= 0) return cudaSuccess;
  if (p.rows > INT32_MAX || p.d > INT32_MAX) return cudaErrorInvalidConfiguration;  // the wrapper refuses first
  const auto s = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
    case DType::kFloat32: return launch_mode<float>(p, forced, s);
    case DType::kFloat16: return launch_mode<__half>(p, forced, s);
    case DType::kBFloat16: return launch_mode<__nv_bfloat16>(p, forced, s);
    case DType::kFloat8E4M3: break;  // not an input dtype
  }
  return cudaErrorInvalidValue;
}

int rms_norm_launch(const NormParams& p, void* stream) { return rms_norm_launch_with(p, nullptr, stream); }

}  // namespace inference_kernels
