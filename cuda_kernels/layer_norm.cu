// LayerNorm over the last dimension on NVIDIA GPUs (torch-free; layer_norm_torch.cpp
// checks the tensors).
//
// y = (x - mean) * rstd * weight + bias in fp32, rounded once to x's dtype, as torch's
// F.layer_norm. Statistics are two-pass: the mean, then the mean of (x - mean)^2.
// Single-pass sum/sum-of-squares cancels catastrophically when |mean| >> std; Welford
// is exact-er but needs a division per element and a costlier merge in the
// reduction. Two passes cost nothing extra here, because the row is already on chip:
//   * rows of up to 4096 16-byte vectors (32768 fp16/bf16, 16384 fp32 elements) are
//     read once into registers (row_kernel.cuh's layouts): a warp per row for short
//     rows (two rows a block, no barrier), else a block per row (the flat kernel, one
//     barrier a reduction, up to 2048 vectors; pick_layout has the shapes and the
//     numbers). x is read once and out written once, the memory
//     roofline's traffic. Weight and bias are read after the reductions (from L1):
//     loading them earlier costs registers, hence resident warps, and measured slower;
//   * longer rows stream: each pass re-reads the row from global memory (L2 holds
//     it after the first), so HBM still sees about one read;
//   * exact fits (RowConfig::exact, 16-bit rows of exactly 4 x tx vectors, tx a
//     power of two from 32 to 512: hidden 1024 to 16384): the flat kernel with the
//     block size fixed at compile time (layer_norm_flat_exact; at hidden 1024 as 64
//     threads of 2 vectors); the piped layout of rms_norm's exact fit
//     (layer_norm_piped_exact) only where a layout is forced (tune_norms): the split
//     rows below beat or matched it wherever it was the default;
//   * 16-bit hidden 16384 below 1024 rows in bf16, up to 2048 in fp16: a row split over
//     a cluster of 4 or 8 blocks (row_split.cuh; layer_norm_split_exact), whose
//     statistics meet by remote stores into each block's shared memory; two rows
//     a cluster past those (layer_norm_split_pair: weight and bias loaded once for
//     both).
//   bf16 elements convert from their 32-bit words (vec_io.cuh's elem_float), one
//   shift or mask each: per half, ptxas spent 1.4 instructions and, in the split
//   rows, registers enough that weight and bias had to wait for the statistics.
//   The exact fits, split and pair read x without allocating in L1 up to 32 MiB of x
//   (ld_x, row_kernel.cuh's kXOnceBytes), so that L1 keeps the weight and bias.
// Rows that are 16-byte aligned (pointers and strides, weight and bias too) move in
// 16-byte vectors (LDG.128/STG.128); any other row takes the scalar path, so every
// size and stride the checks accept is handled.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "block_reduce.cuh"
#include "ptx.cuh"
#include "row_kernel.cuh"
#include "device_info.cuh"
#include "row_pipe.cuh"
#include "row_split.cuh"
#include "gpu_launchers.h"
#include "vec_io.cuh"

namespace {

using inference_kernels::DType;
using inference_kernels::LayerNormParams;
using namespace inference_kernels::cuda;

// Element k of a as fp32: bf16 pairs from their 32-bit words (vec_io.cuh's
// elem_float), unless WORDS is false (layer_norm_split_pair's output pass: there the
// word conversions left ptxas 8 bytes short of registers).
template <bool WORDS, typename T, int VEC>
__device__ __forceinline__ float lane_float(const Pack<T, VEC>& a, int k) {
  if constexpr (WORDS) {
    return elem_float(a, k);
  } else {
    return to_float(a.v[k]);
  }
}

// One output vector from one input vector: (a - mean) * rstd * g + c, rounded once.
template <typename T, int VEC, bool W, bool B, bool WORDS = true>
__device__ __forceinline__ Pack<T, VEC> normalise(const Pack<T, VEC>& a, const Pack<T, VEC>& g,
                                                  const Pack<T, VEC>& c, float mean, float rstd) {
  Pack<T, VEC> out;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    float y = (lane_float<WORDS>(a, k) - mean) * rstd;
    if constexpr (W) y *= lane_float<WORDS>(g, k);
    if constexpr (B) y += lane_float<WORDS>(c, k);
    out.v[k] = from_float<T>(y);
  }
  return out;
}

template <typename T, int VEC>
__device__ __forceinline__ float vec_sum(const Pack<T, VEC>& a) {
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < VEC; ++k) s += elem_float(a, k);
  return s;
}

template <typename T, int VEC>
__device__ __forceinline__ float vec_sq_dev(const Pack<T, VEC>& a, float mean) {
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const float c = elem_float(a, k) - mean;
    s += c * c;
  }
  return s;
}

// The row held in registers: ITEMS vectors a thread, in the layout of row_kernel.cuh.
// x and out may be the same row (layer_norm with out=x): every element is read by
// the thread that writes it, before it writes, so neither pointer is __restrict__.
template <typename T, int VEC, int ITEMS, bool W, bool B>
__global__ void __launch_bounds__(kMaxThreads) layer_norm_cached(LayerNormParams p) {
  pdl_enter();
  using P = Pack<T, VEC>;
  const RowSlot s = row_slot();
  if (s.row >= p.rows) return;  // only in the warp-per-row layout: no barrier to miss
  const int nvec = static_cast<int>(p.d / VEC);
  const P* xr = reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + s.row * p.x.stride);
  // Divided, not multiplied by 1/d: sum / d is correctly rounded, so a constant row's
  // mean is exactly its value and x - mean exactly 0 (the output exactly the bias).
  const float d = static_cast<float>(p.d);
  P a[ITEMS];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int i = s.first + k * s.step;
    if (i < nvec) {
      a[k] = xr[i];
      sum += vec_sum(a[k]);
    }
  }
  const float mean = row_reduce<Sum, 0>(sum) / d;
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if (s.first + k * s.step < nvec) sq += vec_sq_dev(a[k], mean);
  }
  const float rstd = rsqrtf(row_reduce<Sum, 1>(sq) / d + p.eps);
  P* orow = reinterpret_cast<P*>(static_cast<T*>(p.out.ptr) + s.row * p.out.stride);
  const P none{};
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int i = s.first + k * s.step;
    if (i < nvec) {
      const P g = W ? reinterpret_cast<const P*>(p.weight)[i] : none;
      const P c = B ? reinterpret_cast<const P*>(p.bias)[i] : none;
      orow[i] = normalise<T, VEC, W, B>(a[k], g, c, mean, rstd);
    }
  }
  row_group_done();
}

// The flat layout (row_kernel.cuh): as layer_norm_cached with blockDim (tx, 1), but
// no cluster code and one barrier a reduction (row_reduce_flat), so a row costs two
// barriers instead of four. Weight and bias still come after the reductions (see the
// top of the file). Only reached through a forced layout (benchmarks/tune_norms.cu).
template <typename T, int VEC, int ITEMS, bool W, bool B>
__global__ void __launch_bounds__(kFlatThreads) layer_norm_flat(LayerNormParams p) {
  pdl_enter();
  using P = Pack<T, VEC>;
  const int64_t row = blockIdx.x;
  const int t = threadIdx.x, step = blockDim.x;
  const int nvec = static_cast<int>(p.d / VEC);
  const P* xr = reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + row * p.x.stride);
  const float d = static_cast<float>(p.d);
  P a[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if (t + k * step < nvec) a[k] = xr[t + k * step];
  }
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if (t + k * step < nvec) sum += vec_sum(a[k]);
  }
  const float mean = row_reduce_flat<Sum, 0>(sum) / d;
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if (t + k * step < nvec) sq += vec_sq_dev(a[k], mean);
  }
  const float rstd = rsqrtf(row_reduce_flat<Sum, 1>(sq) / d + p.eps);
  P* orow = reinterpret_cast<P*>(static_cast<T*>(p.out.ptr) + row * p.out.stride);
  const P none{};
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int i = t + k * step;
    if (i < nvec) {
      const P g = W ? reinterpret_cast<const P*>(p.weight)[i] : none;
      const P c = B ? reinterpret_cast<const P*>(p.bias)[i] : none;
      orow[i] = normalise<T, VEC, W, B>(a[k], g, c, mean, rstd);
    }
  }
}

// The output of a row of exactly ITEMS x TX vectors held in registers (a), thread t
// holding vectors t + k * TX, two vectors at a time: their weight and bias loads, then
// their stores. Two round trips to L1 for weight and bias where layer_norm_flat takes
// one a vector (a load cannot pass a store to out, which may alias weight and bias as
// far as the compiler knows); all at once would need 16 more registers a thread.
template <typename T, int VEC, int ITEMS, int TX, bool W, bool B>
__device__ __forceinline__ void store_exact(const LayerNormParams& p, int64_t row, int t,
                                            const Pack<T, VEC> (&a)[ITEMS], float mean, float rstd) {
  using P = Pack<T, VEC>;
  static_assert(ITEMS % 2 == 0, "two vectors at a time");
  P* orow = reinterpret_cast<P*>(static_cast<T*>(p.out.ptr) + row * p.out.stride) + t;
#pragma unroll
  for (int k0 = 0; k0 < ITEMS; k0 += 2) {
    P g[2], c[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if constexpr (W) g[k] = reinterpret_cast<const P*>(p.weight)[t + (k0 + k) * TX];
      if constexpr (B) c[k] = reinterpret_cast<const P*>(p.bias)[t + (k0 + k) * TX];
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) orow[(k0 + k) * TX] = normalise<T, VEC, W, B>(a[k0 + k], g[k], c[k], mean, rstd);
  }
}

// Blocks an SM asked of layer_norm_flat_exact: the most whose register bound leaves it
// no spills (ptxas keeps x as fp32 across the three passes once no bounds test
// separates them: 56 registers at 4 vectors a thread, 48 at 2, against 40-54 for
// layer_norm_flat), and for one warp the 32-block limit (64 registers: no fewer warps
// than any count below it).
__host__ __device__ constexpr int flat_exact_blocks(int tx, int items) {
  return tx == 32 ? 32 : 65536 / (tx * (items == 4 ? 56 : 48));
}

// layer_norm_flat for rows of exactly ITEMS x TX 16-byte vectors (RowConfig::exact with
// stages 0; TX a power of two, known at compile time): no bounds test a vector, the
// addresses immediates, the reductions without warp-count tests (row_reduce_fixed: the
// same tree, so the same bits), and d = ITEMS x TX x VEC a power of two, so / d is an
// exact multiply. The same arithmetic as layer_norm_flat in the same order: at the same
// tx and items, the same results bit for bit.
template <typename T, int VEC, int ITEMS, int TX, bool W, bool B, bool ONCE = false>
__global__ void __launch_bounds__(TX, flat_exact_blocks(TX, ITEMS)) layer_norm_flat_exact(LayerNormParams p) {
  pdl_enter();
  using P = Pack<T, VEC>;
  constexpr float kD = float(ITEMS * TX * VEC);
  __shared__ float partial[2][2][TX / 32];  // [reduction][row parity: always 0 here][warp]
  const int64_t row = blockIdx.x;
  const int t = threadIdx.x;
  const P* xr = reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + row * p.x.stride) + t;
  P a[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) a[k] = ld_x<ONCE>(xr + k * TX);
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) sum += vec_sum(a[k]);
  const float mean = row_reduce_fixed<Sum, TX>(sum, partial[0], 0) / kD;
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) sq += vec_sq_dev(a[k], mean);
  const float rstd = rsqrtf(row_reduce_fixed<Sum, TX>(sq, partial[1], 0) / kD + p.eps);
  store_exact<T, VEC, ITEMS, TX, W, B>(p, row, t, a, mean, rstd);
}

// A slice's statistics: its mean and sum of squared deviations (M2).
struct MeanM2 {
  float mean, m2;
};

// Two slices of n elements each merged (Chan, Golub and LeVeque's pairwise update, exact
// in real arithmetic): symmetric in a and b bit for bit, so a butterfly gives every lane
// the same result.
__device__ __forceinline__ MeanM2 merge_equal(MeanM2 a, MeanM2 b, float n) {
  const float d = b.mean - a.mean;
  return {(a.mean + b.mean) * 0.5f, (a.m2 + b.m2) + d * d * (0.5f * n)};
}

// The block's MeanM2 from each thread's over n elements, returned to every thread: the
// warp's butterfly, then the warps' in the same way (TX / 32 a power of two).
template <int TX>
__device__ __forceinline__ MeanM2 block_mean_m2(MeanM2 v, float n, float (&partial)[2][TX / 32]) {
  constexpr int kWarps = TX / 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1, n *= 2.0f) {
    v = merge_equal(v, {__shfl_xor_sync(0xffffffffu, v.mean, o), __shfl_xor_sync(0xffffffffu, v.m2, o)}, n);
  }
  if constexpr (kWarps > 1) {
    const int lane = threadIdx.x % 32;
    if (lane == 0) partial[0][threadIdx.x / 32] = v.mean, partial[1][threadIdx.x / 32] = v.m2;
    __syncthreads();
    v = {partial[0][lane % kWarps], partial[1][lane % kWarps]};
#pragma unroll
    for (int o = 1; o < kWarps; o <<= 1, n *= 2.0f) {
      v = merge_equal(v, {__shfl_xor_sync(0xffffffffu, v.mean, o), __shfl_xor_sync(0xffffffffu, v.m2, o)}, n);
    }
  }
  return v;
}

// Blocks an SM asked of layer_norm_split_exact, for its registers (48 at 2 vectors a
// thread, 64 at 4). Uncapped, bf16 took 63-64 at 2 vectors and 72-96 at 4 (ptxas kept x
// as fp32 across the passes; fp16 40-48 and 64) and lost to the flat fit from 128 rows.
// Capped, fp16 is unchanged; bf16 at 4 vectors keeps x, weight and bias packed
// (launder) and converts them from their words (elem_float): 63 registers, no spill.
// (Until the forty-fourth session bf16 loaded weight and bias after the statistics to
// fit, and converted halves one at a time: 21.7 against 18.7-18.9 us at 1024 x 16384,
// 15.9 against 13.9 at 768; H200, tune_norms, BENCHMARKS.md.)
__host__ __device__ constexpr int split_blocks(int tx, int items) {
  return 65536 / (tx * (items == 4 ? 64 : 48));
}

// The split layout (row_split.cuh): a cluster of CL blocks a row, each holding a
// contiguous slice of ITEMS x TX vectors (rows of exactly CL x ITEMS x TX 16-byte
// vectors). Weight and bias are loaded with x, before the reductions (the flat fits load
// them after, to keep registers for resident warps; here a block's life is short and
// a load after the reductions is one more L2 round trip in it). ONE: each thread's
// mean and M2 over its own elements (two passes in registers), merged up the block and
// across the ranks by the pairwise update, one exchange of two floats a row; else the
// mean, then the squared deviations about it, two exchanges. Either is a two-pass
// statistic at each level; sums run in another order than the other layouts.
template <typename T, int VEC, int ITEMS, int TX, int CL, bool W, bool B, bool ONE, bool ONCE>
__global__ void __launch_bounds__(TX, split_blocks(TX, ITEMS)) layer_norm_split_exact(LayerNormParams p) {
  pdl_enter();
  using P = Pack<T, VEC>;
  constexpr float kThread = float(ITEMS * VEC), kSlice = kThread * TX, kD = CL * kSlice;
  // Two mbarriers either way: with one, ptxas dropped fence.mbarrier_init (no
  // FENCE.VIEW.ASYNC.S in the SASS) and racecheck flagged it (row_split.cuh).
  __shared__ SplitRow<TX, CL, 2, ONE ? 2 : 1> s;
  const unsigned rank = cluster_rank();
  const int64_t row = blockIdx.x / CL;
  const int first = static_cast<int>(rank) * ITEMS * TX + static_cast<int>(threadIdx.x);
  const P* xr = reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + row * p.x.stride) + first;
  P a[ITEMS], g[ITEMS], c[ITEMS];
  constexpr bool kBf4 = std::is_same_v<T, __nv_bfloat16> && ITEMS == 4;  // split_blocks
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) a[k] = ld_x<ONCE>(xr + k * TX);
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if constexpr (W) g[k] = reinterpret_cast<const P*>(p.weight)[first + k * TX];
    if constexpr (B) c[k] = reinterpret_cast<const P*>(p.bias)[first + k * TX];
  }
  split_start(s);
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) sum += vec_sum(a[k]);
  float mean, m2;
  if constexpr (ONE) {
    const float mean_t = sum / kThread;
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) sq += vec_sq_dev(a[k], mean_t);
    const MeanM2 blk = block_mean_m2<TX>({mean_t, sq}, kThread, s.partial[0]);
    const float mine[2] = {blk.mean, blk.m2};
    const float (&all)[CL][2] = split_exchange(s, 0, mine, rank);
    mean = 0.0f;
#pragma unroll
    for (int r = 0; r < CL; ++r) mean += all[r][0];
    mean /= float(CL);
    float dev = 0.0f;
    m2 = 0.0f;
#pragma unroll
    for (int r = 0; r < CL; ++r) {
      m2 += all[r][1];
      dev += (all[r][0] - mean) * (all[r][0] - mean);
    }
    m2 += kSlice * dev;
  } else {
    mean = split_reduce<Sum>(s, 0, sum, rank) / kD;
    if constexpr (kBf4) {
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) launder(a[k]);
    }
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) sq += vec_sq_dev(a[k], mean);
    m2 = split_reduce<Sum>(s, 1, sq, rank);
  }
  const float rstd = rsqrtf(m2 / kD + p.eps);
  P* orow = reinterpret_cast<P*>(static_cast<T*>(p.out.ptr) + row * p.out.stride) + first;
  if constexpr (kBf4) {
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      launder(a[k]);
      if constexpr (W) launder(g[k]);
      if constexpr (B) launder(c[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) orow[k * TX] = normalise<T, VEC, W, B>(a[k], g[k], c[k], mean, rstd);
}

// Blocks an SM asked of layer_norm_split_pair: two rows of 4 vectors a thread, weight
// and bias held in registers take 96 (a cap of 80 spilled 126 bytes in bf16).
__host__ __device__ constexpr int pair_blocks(int tx) { return 65536 / (tx * 96); }

// Two rows a cluster (RowConfig rows_per_block 2 with cluster > 1): as
// layer_norm_split_exact with two exchanges, but each block holds its slice of rows 2c
// and 2c + 1 and loads weight and bias once for both, and each exchange carries both
// rows' sums (two floats a rank). Why: without weight and bias, the one-row kernel took
// 17.93-18.30 us at fp16 1024 x 16384, with them 18.99-22.29 (H200, tune_norms,
// thirty-fifth session): they are two more bytes read (from L2) for each byte of x.
// Here they cost half that, and each block has twice the bytes of x in flight. The
// same sums in the same order as layer_norm_split_exact's two-exchange form: the same
// bits. The last cluster of an odd row count normalises its row twice and stores once.
template <typename T, int VEC, int ITEMS, int TX, int CL, bool W, bool B, bool ONCE>
__global__ void __launch_bounds__(TX, pair_blocks(TX)) layer_norm_split_pair(LayerNormParams p) {
  pdl_enter();
  using P = Pack<T, VEC>;
  constexpr float kD = float(CL * ITEMS * TX * VEC);
  __shared__ SplitRow<TX, CL, 2, 2> s;
  const unsigned rank = cluster_rank();
  const int64_t row0 = blockIdx.x / CL * 2;
  const bool two = row0 + 1 < p.rows;
  const int64_t row1 = two ? row0 + 1 : row0;
  const int first = static_cast<int>(rank) * ITEMS * TX + static_cast<int>(threadIdx.x);
  const P* xr0 = reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + row0 * p.x.stride) + first;
  const P* xr1 = reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + row1 * p.x.stride) + first;
  P a[2][ITEMS], g[ITEMS], c[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) a[0][k] = ld_x<ONCE>(xr0 + k * TX);
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) a[1][k] = ld_x<ONCE>(xr1 + k * TX);
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if constexpr (W) g[k] = reinterpret_cast<const P*>(p.weight)[first + k * TX];
    if constexpr (B) c[k] = reinterpret_cast<const P*>(p.bias)[first + k * TX];
  }
  split_start(s);
  float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) sum0 += vec_sum(a[0][k]), sum1 += vec_sum(a[1][k]);
  float mean0, mean1;
  split_sum2(s, 0, sum0, sum1, rank, mean0, mean1);
  mean0 /= kD, mean1 /= kD;
  // x stays packed across the passes (launder): ptxas would otherwise keep 64 floats.
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) launder(a[0][k]), launder(a[1][k]);
  float sq0 = 0.0f, sq1 = 0.0f;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) sq0 += vec_sq_dev(a[0][k], mean0), sq1 += vec_sq_dev(a[1][k], mean1);
  float m2_0, m2_1;
  split_sum2(s, 1, sq0, sq1, rank, m2_0, m2_1);
  const float rstd0 = rsqrtf(m2_0 / kD + p.eps), rstd1 = rsqrtf(m2_1 / kD + p.eps);
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    launder(a[0][k]), launder(a[1][k]);
    if constexpr (W) launder(g[k]);
    if constexpr (B) launder(c[k]);
  }
  P* o0 = reinterpret_cast<P*>(static_cast<T*>(p.out.ptr) + row0 * p.out.stride) + first;
  P* o1 = reinterpret_cast<P*>(static_cast<T*>(p.out.ptr) + row1 * p.out.stride) + first;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) o0[k * TX] = normalise<T, VEC, W, B, false>(a[0][k], g[k], c[k], mean0, rstd0);
  if (two) {
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) o1[k * TX] = normalise<T, VEC, W, B, false>(a[1][k], g[k], c[k], mean1, rstd1);
  }
}

// The piped layout (row_pipe.cuh, as rms_norm_piped_exact) for LayerNorm rows of exactly
// ITEMS x kTx 16-byte vectors (kTx = piped_threads(ITEMS); 16-bit hidden 16384, 384-671
// rows in bf16): persistent blocks keep the next row on the way by
// cp.async into a 2-stage ring (the stage is the row's parity), the reductions alternate
// between two shared arrays by the same parity, so one barrier a reduction still suffices
// from one row to the next. The arithmetic is layer_norm_flat's in the same order (the
// same bits at the same tx and items). Weight and bias are loaded once a block, before
// the first row: the flat kernel loads them after its reductions to save registers for
// resident warps, but one block an SM holds 512 threads here however few registers they
// take (ITEMS 4). x and out may be the same row: the rows in flight are later rows.
// Instantiated at ITEMS 4 only (hidden 16384): at hidden 8192 (ITEMS 2) the flat exact
// fit measured faster (H200, 4096 x 8192 fp16: 35.33 against 36.81 us).
template <typename T, int VEC, int ITEMS, bool W, bool B>
__global__ void __launch_bounds__(piped_threads(ITEMS), 1)
    layer_norm_piped_exact(LayerNormParams p, int /*stages: 2*/) {
  pdl_enter();
  using P = Pack<T, VEC>;
  constexpr int kTx = piped_threads(ITEMS), kNvec = ITEMS * kTx;
  constexpr float kD = float(kNvec * VEC);
  extern __shared__ uint4 ring_smem[];
  __shared__ float partial[2][2][kTx / 32];  // [reduction][row parity][warp]
  const int t = threadIdx.x;
  const FixedRing<1, ITEMS, kTx> ring(ring_smem);
  // Row indices as 32-bit unsigned: rows <= INT32_MAX (layer_norm_launch_with), so row +
  // gridDim.x cannot wrap.
  const unsigned rows = static_cast<unsigned>(p.rows);
  auto fetch = [&](unsigned row, int stage) {
    const P* src[1] = {reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + int64_t{row} * p.x.stride)};
    ring.fetch(stage, src, row < rows);  // a group either way, so that cp_async_wait<1> counts rows
  };
  unsigned row = blockIdx.x;
  fetch(row, 0);
  P g[ITEMS], c[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if constexpr (W) g[k] = reinterpret_cast<const P*>(p.weight)[t + k * kTx];
    if constexpr (B) c[k] = reinterpret_cast<const P*>(p.bias)[t + k * kTx];
  }
  for (int parity = 0; row < rows; row += gridDim.x, parity ^= 1) {
    fetch(row + gridDim.x, parity ^ 1);
    cp_async_wait<1>();  // this thread's copies of this row have landed
    P a[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      a[k] = ring.template read<P>(parity, 0, k);
    }
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) sum += vec_sum(a[k]);
    const float mean = row_reduce_fixed<Sum, kTx>(sum, partial[0], parity) / kD;
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) sq += vec_sq_dev(a[k], mean);
    const float rstd = rsqrtf(row_reduce_fixed<Sum, kTx>(sq, partial[1], parity) / kD + p.eps);
    P* orow = reinterpret_cast<P*>(static_cast<T*>(p.out.ptr) + int64_t{row} * p.out.stride) + t;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) orow[k * kTx] = normalise<T, VEC, W, B>(a[k], g[k], c[k], mean, rstd);
  }
  cp_async_wait<0>();
}

// Rows too long to cache: one block per row, each pass re-reads the row.
template <typename T, int VEC>
__global__ void __launch_bounds__(kMaxThreads) layer_norm_stream(LayerNormParams p) {
  pdl_enter();
  using P = Pack<T, VEC>;
  const int64_t row = blockIdx.x;
  const P* xr = reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + row * p.x.stride);
  P* orow = reinterpret_cast<P*>(static_cast<T*>(p.out.ptr) + row * p.out.stride);
  const P* w = reinterpret_cast<const P*>(p.weight);
  const P* b = reinterpret_cast<const P*>(p.bias);
  const int nvec = static_cast<int>(p.d / VEC);
  const float d = static_cast<float>(p.d);
  float sum = 0.0f;
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) sum += vec_sum(xr[i]);
  const float mean = block_reduce<Sum>(sum) / d;
  float sq = 0.0f;
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) sq += vec_sq_dev(xr[i], mean);
  const float rstd = rsqrtf(block_reduce<Sum>(sq) / d + p.eps);
  const P none{};
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    const P g = w ? w[i] : none, c = b ? b[i] : none;
    if (w && b) {
      orow[i] = normalise<T, VEC, true, true>(xr[i], g, c, mean, rstd);
    } else if (w) {
      orow[i] = normalise<T, VEC, true, false>(xr[i], g, c, mean, rstd);
    } else if (b) {
      orow[i] = normalise<T, VEC, false, true>(xr[i], g, c, mean, rstd);
    } else {
      orow[i] = normalise<T, VEC, false, false>(xr[i], g, c, mean, rstd);
    }
  }
}

// The split exact fits (RowConfig::exact with cluster > 1, stages 0) the launcher
// instantiates: 16-bit hidden 16384 (2048 vectors). The statistics go with the slice:
// one exchange at 2 vectors a thread, two at 4, the faster of the two at each where
// both were measured (H200, tune_norms, thirty-third session, whose logs were lost with
// its machine; figures as noted then): 8 x 128 x 2 at 1 x 16384 bf16 1.77 us against
// the two exchanges' best, 2.00; 4 x 128 x 4 at 1024 x 16384 fp16 19.04 against 20.20,
// 2 x 256 x 4 19.45 against 20.62.
template <typename T, int VEC, bool W, bool B>
cudaError_t launch_split(const LayerNormParams& p, const RowConfig& c, int64_t nvec, cudaStream_t stream) {
  if (!c.flat || c.stages != 0 || int64_t{c.tx} * c.items * c.cluster != nvec) return cudaErrorInvalidConfiguration;
  const auto is = [&](int cl, int tx, int items) { return c.cluster == cl && c.tx == tx && c.items == items; };
  return with_once(p.rows * p.d * int64_t{sizeof(T)} <= kXOnceBytes, [&](auto once) {
    constexpr bool O = decltype(once)::value;
    if (c.rows_per_block == 2) {  // two rows a cluster: a grid of row pairs, one row a block's slice
      if (!is(4, 128, 4)) return cudaErrorInvalidConfiguration;
      RowConfig one = c;
      one.rows_per_block = 1;
      return launch_rows(layer_norm_split_pair<T, VEC, 4, 128, 4, W, B, O>, p, one, (p.rows + 1) / 2, stream);
    }
    if (c.rows_per_block != 1) return cudaErrorInvalidConfiguration;
    if (is(8, 128, 2)) return launch_rows(layer_norm_split_exact<T, VEC, 2, 128, 8, W, B, true, O>, p, c, p.rows, stream);
    if (is(4, 256, 2)) return launch_rows(layer_norm_split_exact<T, VEC, 2, 256, 4, W, B, true, O>, p, c, p.rows, stream);
    if (is(4, 128, 4)) return launch_rows(layer_norm_split_exact<T, VEC, 4, 128, 4, W, B, false, O>, p, c, p.rows, stream);
    if (is(2, 256, 4)) return launch_rows(layer_norm_split_exact<T, VEC, 4, 256, 2, W, B, false, O>, p, c, p.rows, stream);
    return cudaErrorInvalidConfiguration;
  });
}

// The exact-fit kernels (RowConfig::exact; fits() has checked tx x items == nvec):
// 16-bit rows only (fp32 is not measured), 4 vectors a thread; stages 2:
// layer_norm_piped_exact (512 threads), stages 0: layer_norm_flat_exact at the block
// sizes pick_layout gives it.
template <typename T, int VEC, bool W, bool B>
cudaError_t launch_exact(const LayerNormParams& p, const RowConfig& c, cudaStream_t stream) {
  if constexpr (sizeof(T) != 2 || sizeof(T) * VEC != 16) {
    return cudaErrorInvalidConfiguration;
  } else {
    const int64_t nvec = p.d / VEC;
    if (c.cluster > 1) return launch_split<T, VEC, W, B>(p, c, nvec, stream);
    if (!c.flat || int64_t{c.tx} * c.items != nvec) return cudaErrorInvalidConfiguration;
    const bool once = p.rows * p.d * int64_t{sizeof(T)} <= kXOnceBytes;
    if (c.items == 2 && c.stages == 0) {
      return with_block_size<64>(c.tx, [&](auto tx) {
        return with_once(once, [&](auto o) {
          return launch_rows(layer_norm_flat_exact<T, VEC, 2, decltype(tx)::value, W, B, decltype(o)::value>, p, c,
                             p.rows, stream);
        });
      });
    }
    if (c.items != 4) return cudaErrorInvalidConfiguration;
    if (c.stages == 2) {
      if (c.tx != piped_threads(4)) return cudaErrorInvalidConfiguration;
      return launch_piped(layer_norm_piped_exact<T, VEC, 4, W, B>, p, c, p.rows, nvec, 1, stream);
    }
    if (c.stages != 0) return cudaErrorInvalidConfiguration;
    return with_block_size<32, 64, 128, 256, 512>(c.tx, [&](auto tx) {
      return with_once(once, [&](auto o) {
        return launch_rows(layer_norm_flat_exact<T, VEC, 4, decltype(tx)::value, W, B, decltype(o)::value>, p, c,
                           p.rows, stream);
      });
    });
  }
}

// pick_layout's 64 threads x 2 vectors at hidden 1024 (16-bit), or a warp x 4 where the
// warp's blocks hold every row at once and the 64-thread ones do not: the second wave
// costs more than the wider block saves (H200, 4096 x 1024 fp16 with weight and bias:
// a warp's 63 registers leave 32 blocks an SM, 4224 rows on 132 SMs, 64 x 2's 40
// registers 25 blocks, 3300 rows; 5.78 against 6.25 us; at 2048 rows, both one wave,
// 3.58 against 3.64; at 8192, 9.26 against 9.55).
template <typename T, int VEC, bool W, bool B>
RowConfig one_wave(RowConfig c, int64_t rows) {
  if constexpr (sizeof(T) == 2 && sizeof(T) * VEC == 16) {
    if (c.exact && c.stages == 0 && c.items == 2 && c.tx == 64 &&
        rows > resident_blocks_once<layer_norm_flat_exact<T, VEC, 2, 64, W, B>, 64>() &&
        rows <= resident_blocks_once<layer_norm_flat_exact<T, VEC, 4, 32, W, B>, 32>()) {
      c.tx = 32, c.items = 4;
    }
  }
  return c;
}

// picked: c is pick_layout's (not a forced layout), which one_wave may change.
template <typename T, int VEC, bool W, bool B>
cudaError_t launch_cached(const LayerNormParams& p, const RowConfig& c, bool picked, cudaStream_t stream) {
  if (c.exact) return launch_exact<T, VEC, W, B>(p, picked ? one_wave<T, VEC, W, B>(c, p.rows) : c, stream);
  // The general piped layout (row_pipe.cuh) measured no faster than the flat one for
  // LayerNorm (H200, tune_norms: 46.37 against 44.26 us at 8192 x 5120 fp16, 20.25
  // against 20.14 at 4096 x 4096), so this op has only its exact fit.
  if (c.stages > 0) return cudaErrorInvalidConfiguration;
  if (c.flat) {
    switch (c.items) {
      case 1: return launch_rows(layer_norm_flat<T, VEC, 1, W, B>, p, c, p.rows, stream);
      case 2: return launch_rows(layer_norm_flat<T, VEC, 2, W, B>, p, c, p.rows, stream);
      case 4: return launch_rows(layer_norm_flat<T, VEC, 4, W, B>, p, c, p.rows, stream);
      default: return cudaErrorInvalidConfiguration;
    }
  }
  switch (c.items) {
    case 1: return launch_rows(layer_norm_cached<T, VEC, 1, W, B>, p, c, p.rows, stream);
    case 2: return launch_rows(layer_norm_cached<T, VEC, 2, W, B>, p, c, p.rows, stream);
    case 4: return launch_rows(layer_norm_cached<T, VEC, 4, W, B>, p, c, p.rows, stream);
    default: return cudaErrorInvalidConfiguration;
  }
}

// The layout for rows of nvec vectors (see the top of the file); items 0: stream.
// H200 measurements (fp16; tune_norms, BENCHMARKS.md):
// - up to 132 rows: a warp per row up to 128 vectors, then the flat kernel with one
//   vector a thread (2.39 against 3.25 us at 1 x 4096);
// - more rows: the flat kernel with 4 vectors a thread over the fewest warps that
//   cover the row, from 64 vectors (a warp) to 2048 (512 threads). An exact fit
//   matters: at 8192 x 5120 (640 vectors) 160 x 4 took 43.96 us where 512 x 2, with
//   384 of its 1024 slots idle, took 56.02; at 4096 x 4096 128 x 4 took 20.21 us
//   (256 x 2: 20.43); at 16384 x 1024 a warp x 4 took 18.99 us (the warp-per-row
//   block of two rows: 19.63); at 1024 x 16384 512 x 4 took 21.83 us;
// - 16-bit rows of exactly 4 x tx vectors, tx a power of two (exact16): the same layout
//   with the block size fixed at compile time (layer_norm_flat_exact), the same bits,
//   3-8% faster at many rows (ninth session, tune_ln_exact: 18.94 against 20.19 us at
//   4096 x 4096 fp16, 18.51 against 19.04 at 16384 x 1024, 35.33 against 36.64 at 4096 x
//   8192, 34.53 against 35.72 at 16384 x 2048 bf16), 25-30% at one row (2.94 against 3.90
//   us at 1 x 16384, 2.32 against 3.31 at 1 x 8192); (the piped exact fit,
//   layer_norm_piped_exact, ran bf16 hidden 16384 at 384-671 rows until the forty-fourth
//   session: 8.32 against the flat fit's 9.21 us at 384 rows; the split rows below now
//   take those rows); at 128 vectors (hidden 1024) 64 threads of 2 vectors (eleventh
//   session: 17.88 against 18.56 us at 16384 x 1024 fp16, 17.93 against 18.50 bf16; 1.79
//   against 1.90 at 256 rows), except at the row counts one_wave finds; 2 vectors a
//   thread lost at every other measured width (19.60 against 18.88 us at 4096 x 4096,
//   44.19 against 35.40 at 4096 x 8192, 29.86 against 20.11 at 1024 x 16384 fp16);
// - 16-bit hidden 16384 below 1024 rows in bf16 and up to 2048 in fp16, the split rows
//   (layer_norm_split_exact; H200, tune_norms, thirty-fourth session, fp16 / bf16 us):
//   up to 64 rows a cluster of 8 x 128 threads x 2 vectors (1.79 / 1.80 against the flat
//   fit's 2.83 / 2.94 at one row; 3.28 / 3.26 against 3.78 / 3.86 at 64), to 143 rows 4 x
//   256 x 2 (4.34 / 4.41 against 4.68 / 4.80 at 128 rows), then 4 x 128 x 4 (4.93 / 5.19
//   against 5.38 / 5.57 at 160; 5.31 / 5.59 against 5.61 / 5.76 at 192; bf16 from the
//   fifth call, s34e). In fp16 the split stays level or
//   ahead to 2048 rows (6.31 against 6.24-6.32 at 263, 8.09 against the piped 8.03 at 384,
//   9.84 against 10.01 at 512, 19.07 against 20.23 at 1024, 35.07 against the flat 36.75
//   at 2048; past 2048 the pair, below). The bound 144 is a midpoint between measured
//   rows. In bf16, since its elements convert from their words and the split
//   loads weight and bias with x (s44b, two rounds, us, 4 x 128 x 4 against the rule
//   before): 256 rows 5.96-5.97 against the flat fit's 5.93-5.95, 384 8.03 against the
//   piped 7.89-8.07, 512 9.76-9.77 against the piped 9.94, 768 13.93-13.96 against the
//   pair's 14.15-14.24, 1024 18.65-18.88 against the pair's 18.77-18.81, 2048 35.47-35.49
//   against the pair's 35.23-35.26: the split below 1024 rows, the pair from 1024 (before
//   s44b bf16 ran the flat fit at 208-383 rows and the piped one at 384-671);
// - hidden 16384 past the split rows: two rows a cluster of 4 x 128 x 4
//   (layer_norm_split_pair; thirty-fifth session, us): 19.61 against the piped fit's
//   20.46 at 1024 rows, 35.52 against 37.83 at 2048, 67.42 against 71.77 at 4096 (s35d;
//   more rows unmeasured, the same regime); at 384 rows 8.52 against 8.35. Between 512
//   and 1024 (s39d, two rounds, us, pair against piped): 512 10.41-10.42 against
//   10.21-10.23, 576 11.66-11.70 against 11.79-11.88, 640 12.99-13.02 against
//   12.46-12.50, 704 13.96-13.97 against 14.78, 768 14.93-14.94 against 15.45-15.48,
//   832 16.12-16.16 against 17.20-17.33, 896 17.26-17.29 against 17.98-18.03, 960
//   18.43-18.47 against 19.92-20.05; the pair took bf16 from 672 rows until s44b. fp16 at 2048
//   rows 35.08 / 34.90 against the one-row split's 35.27 / 35.13 (s35d / s35e), within
//   1%, and 19.33 against 19.12 at 1024: fp16 keeps the one-row split to 2048 rows and
//   takes the pair past it, where the piped fit ran before (s39f, one round, us: 2560
//   rows 42.75 against 45.77, 3072 50.62 against 54.51, 4096 66.75 against 71.73);
// - longer rows the cached block, then streaming.
inline RowConfig pick_layout(int64_t rows, int64_t nvec, bool exact16, bool bf16) {
  constexpr int kItems = 4;
  RowConfig c;
  if (nvec <= 32 * kItems && (rows <= 132 || nvec <= 64)) {
    c.tx = 32;
    c.rows_per_block = 2;
    c.items = nvec <= 32 ? 1 : (nvec <= 64 ? 2 : 4);
  } else if (nvec <= kFlatThreads && rows <= 132) {
    c.flat = true;
    c.tx = round_up(nvec, 32);
    c.items = 1;
  } else if (nvec <= kItems * kFlatThreads) {
    c.flat = true;
    c.tx = round_up((nvec + kItems - 1) / kItems, 32);
    c.items = kItems;
  } else if (nvec <= int64_t{kItems} * kMaxThreads) {
    c.items = kItems;
    c.tx = round_up((nvec + kItems - 1) / kItems, 32);
  } else {
    c.items = 0;
  }
  if (exact16 && c.flat && c.items == 4 && int64_t{c.tx} * 4 == nvec && (c.tx & (c.tx - 1)) == 0) {
    c.exact = true;
    if (nvec == 128) c.tx = 64, c.items = 2;
    if (nvec == 2048 && rows < (bf16 ? 1024 : 2049)) {  // the split rows
      c.cluster = rows <= 64 ? 8 : 4;
      c.tx = rows <= 64 ? 128 : (rows < 144 ? 256 : 128);
      c.items = rows < 144 ? 2 : 4;
    } else if (nvec == 2048) {  // two rows a cluster, past the split rows
      c.cluster = 4;
      c.tx = 128;
      c.items = 4;
      c.rows_per_block = 2;
    }
  }
  return c;
}

template <typename T, int VEC>
cudaError_t launch_width(const LayerNormParams& p, const RowConfig* forced, cudaStream_t stream) {
  const int64_t nvec = p.d / VEC;
  RowConfig c = forced ? *forced : pick_layout(p.rows, nvec, sizeof(T) == 2 && VEC == 8, std::is_same_v<T, __nv_bfloat16>);
  if (c.items > 0 && !fits(c, p.rows, nvec)) {
    if (forced) return cudaErrorInvalidConfiguration;
    c.items = 0;
  }
  if (c.items == 0) {
    return launch_kernel({dim3(static_cast<unsigned>(p.rows)), dim3(kMaxThreads), 0, stream}, layer_norm_stream<T, VEC>, p);
  }
  if (p.weight && p.bias) return launch_cached<T, VEC, true, true>(p, c, !forced, stream);
  if (p.weight) return launch_cached<T, VEC, true, false>(p, c, !forced, stream);
  if (p.bias) return launch_cached<T, VEC, false, true>(p, c, !forced, stream);
  return launch_cached<T, VEC, false, false>(p, c, !forced, stream);
}

template <typename T>
cudaError_t launch(const LayerNormParams& p, const RowConfig* forced, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = p.d % kVec == 0 && p.out.stride % kVec == 0 && p.x.stride % kVec == 0 &&
                   aligned(p.out.ptr, 16) && aligned(p.x.ptr, 16) &&
                   (!p.weight || aligned(p.weight, 16)) && (!p.bias || aligned(p.bias, 16));
  return vec ? launch_width<T, kVec>(p, forced, stream) : launch_width<T, 1>(p, forced, stream);
}

}  // namespace

namespace inference_kernels {

// forced: a layout to use instead of pick_layout's (benchmarks/tune_norms.cu), or null.
int layer_norm_launch_with(const LayerNormParams& p, const cuda::RowConfig* forced, void* stream) {
  if (p.rows <= 0 || p.d <= 0) return cudaSuccess;
  // The wrapper refuses these first: the grid is one block per row, and the kernel
  // indexes vectors of a row with int.
  if (p.rows > INT32_MAX || p.d > INT32_MAX) return cudaErrorInvalidConfiguration;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
    case DType::kFloat32: return launch<float>(p, forced, s);
    case DType::kFloat16: return launch<__half>(p, forced, s);
    case DType::kBFloat16: return launch<__nv_bfloat16>(p, forced, s);
    case DType::kFloat8E4M3: break;  // not an input dtype
  }
  return cudaErrorInvalidValue;
}

int layer_norm_launch(const LayerNormParams& p, void* stream) {
  return layer_norm_launch_with(p, nullptr, stream);
}

}  // namespace inference_kernels
