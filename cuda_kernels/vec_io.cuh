// Element conversions and 16-byte vectors shared by the CUDA kernels (torch-free).
// Arithmetic is fp32; to_float / from_float move fp32, fp16 and bf16 in and out
// of it with round-to-nearest-even, as torch's own casts do.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "fp8.h"
#include "vec_pack.h"

namespace inference_kernels::cuda {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Element k of a pack as fp32, the value to_float gives. A bf16 pair converts from its
// 32-bit word with one integer op an element (shift or mask): ptxas made 1.4 of
// to_float on the halves (PRMT to take each half out, then the shift).
template <typename T, int N>
__device__ __forceinline__ float elem_float(const Pack<T, N>& a, int k) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && N % 2 == 0) {
    uint32_t w;
    __builtin_memcpy(&w, &a.v[k & ~1], 4);
    return __uint_as_float(k & 1 ? (w & 0xffff0000u) : (w << 16));
  } else {
    return to_float(a.v[k]);
  }
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// float8_e4m3fn bits of v: clamp_fp8 (saturate, keep NaN), then cvt.rn.satfinite,
// which rounds to nearest even as c10::Float8_e4m3fn does on the CPU (ties and fp8
// subnormals alike).
__device__ __forceinline__ __nv_fp8_storage_t to_fp8(float v) {
  return __nv_cvt_float_to_fp8(clamp_fp8(v), __NV_SATFINITE, __NV_E4M3);
}

using inference_kernels::aligned;
using inference_kernels::Pack;

}  // namespace inference_kernels::cuda
