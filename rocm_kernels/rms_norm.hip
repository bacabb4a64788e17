// RMSNorm, fused residual-add + RMSNorm, and both with FP8 (float8_e4m3fnuz) output, on
// AMD CDNA GPUs (gfx942, gfx90a; torch-free, the launcher ABI of gpu_launchers.h).
//
// Written for CDNA rather than hipified from rms_norm.cu: one block per row, 64-lane
// wavefronts, the block reduction goes through __shfl_xor over 64 lanes and then LDS
// (one slot per wave, at most 16). Pass 1 reads the row (adds the residual and writes
// the rounded sum back, when fused) and reduces the sum of squares in fp32; the next
// pass re-reads the row, which the first left in L2, and writes the output. Dynamic
// FP8 adds a pass for the row's absmax. 16-byte aligned rows move in 16-byte vectors
// (global_load_dwordx4), any other row takes the scalar path. Rounding matches the
// CPU and CUDA backends and HF's LlamaRMSNorm (see cpu_kernels/rms_norm.cpp).
#include <hip/hip_runtime.h>

#include <algorithm>
#include <cstdint>

#include "block_reduce_hip.h"
#include "fp8.h"
#include "gpu_launchers.h"
#include "vec_io_hip.h"

namespace {

using inference_kernels::DType;
using inference_kernels::NormOut;
using inference_kernels::NormParams;
using namespace inference_kernels::rocm;

// y = round(round(a * inv_rms) * g), the normalised value in T, as a float.
template <typename T>
__device__ __forceinline__ float norm_value(T a, T g, float inv_rms) {
  return to_float(from_float<T>(to_float(from_float<T>(to_float(a) * inv_rms)) * to_float(g)));
}

// x and out may be the same row (rms_norm with out=x): every element is read before
// the same thread writes it, so neither pointer is __restrict__.
template <typename T, int VEC, bool FUSED, NormOut MODE>
__global__ void __launch_bounds__(kMaxThreads) rms_norm_kernel(NormParams p) {
  using P = Pack<T, VEC>;
  const int64_t row = blockIdx.x;
  const P* xr = reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + row * p.x.stride);
  P* rr = FUSED ? reinterpret_cast<P*>(static_cast<T*>(p.res.ptr) + row * p.res.stride) : nullptr;
  const P* w = reinterpret_cast<const P*>(p.weight);
  const int64_t nvec = p.d / VEC;

  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
    P a = xr[i];
    if constexpr (FUSED) {
      const P b = rr[i];
#pragma unroll
      for (int k = 0; k < VEC; ++k) a.v[k] = from_float<T>(to_float(a.v[k]) + to_float(b.v[k]));
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
      const P a = src[i], g = w[i];
      P y;
#pragma unroll
      for (int k = 0; k < VEC; ++k) y.v[k] = from_float<T>(norm_value(a.v[k], g.v[k], inv_rms));
      orow[i] = y;
    }
  } else {
    float inv_scale;
    if constexpr (MODE == NormOut::kFp8Static) {
      inv_scale = 1.0f / *p.scale;
    } else {
      float absmax = 0.0f;
      for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
        const P a = src[i], g = w[i];
#pragma unroll
        for (int k = 0; k < VEC; ++k) absmax = nan_max(absmax, fabsf(norm_value(a.v[k], g.v[k], inv_rms)));
      }
      // The fnuz rule: max(absmax / 240, 1 / (240 * 512)) (common/fp8.h).
      const float scale = inference_kernels::dynamic_fp8_fnuz_scale(block_reduce<Max>(absmax));
      if (threadIdx.x == 0) p.row_scales[row] = scale;
      inv_scale = 1.0f / scale;
    }
    using Q = Pack<uint8_t, VEC>;
    Q* orow = reinterpret_cast<Q*>(static_cast<uint8_t*>(p.out.ptr) + row * p.out.stride);
    for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
      const P a = src[i], g = w[i];
      Q q;
#pragma unroll
      for (int k = 0; k < VEC; ++k) q.v[k] = to_fp8(norm_value(a.v[k], g.v[k], inv_rms) * inv_scale);
      orow[i] = q;
    }
  }
}

template <typename T, bool FUSED, NormOut MODE>
void launch(const NormParams& p, hipStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kOutBytes = MODE == NormOut::kSame ? 16 : kVec;  // fp8: one byte an element
  const bool vec = p.d % kVec == 0 && p.out.stride % kVec == 0 && p.x.stride % kVec == 0 &&
                   (!FUSED || p.res.stride % kVec == 0) && aligned(p.out.ptr, kOutBytes) &&
                   aligned(p.x.ptr, 16) && (!FUSED || aligned(p.res.ptr, 16)) &&
                   aligned(p.weight, 16);
  const int64_t work = vec ? p.d / kVec : p.d;
  // Whole waves, one element (vector) per thread up to 16 waves.
  const int threads = static_cast<int>(std::min<int64_t>(kMaxThreads, (work + kWave - 1) / kWave * kWave));
  const dim3 grid(static_cast<unsigned>(p.rows));
  if (vec) {
    rms_norm_kernel<T, kVec, FUSED, MODE><<<grid, threads, 0, stream>>>(p);
  } else {
    rms_norm_kernel<T, 1, FUSED, MODE><<<grid, threads, 0, stream>>>(p);
  }
}

template <typename T, NormOut MODE>
void launch_fused_or_not(const NormParams& p, hipStream_t stream) {
  if (p.res.ptr) {
    launch<T, true, MODE>(p, stream);
  } else {
    launch<T, false, MODE>(p, stream);
  }
}

template <typename T>
void launch_mode(const NormParams& p, hipStream_t stream) {
  switch (p.mode) {
    case NormOut::kSame: launch_fused_or_not<T, NormOut::kSame>(p, stream); break;
    case NormOut::kFp8Static: launch_fused_or_not<T, NormOut::kFp8Static>(p, stream); break;
    case NormOut::kFp8Dynamic: launch_fused_or_not<T, NormOut::kFp8Dynamic>(p, stream); break;
  }
}

}  // namespace

namespace inference_kernels {

int rms_norm_launch(const NormParams& p, void* stream) {
  if (p.rows <= 0 || p.d <= 0) return hipSuccess;
  if (p.rows > INT32_MAX) return hipErrorInvalidConfiguration;  // the wrapper refuses first
  const auto s = static_cast<hipStream_t>(stream);
  switch (p.dtype) {
    case DType::kFloat32: launch_mode<float>(p, s); break;
    case DType::kFloat16: launch_mode<Half>(p, s); break;
    case DType::kBFloat16: launch_mode<BFloat16>(p, s); break;
    case DType::kFloat8E4M3: return hipErrorInvalidValue;  // not an input dtype
  }
  return hipGetLastError();
}

}  // namespace inference_kernels
