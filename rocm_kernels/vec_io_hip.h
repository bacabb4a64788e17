// Element conversions and 16-byte vectors shared by the ROCm
// kernels (torch-free, HIP device code for CDNA: gfx942, gfx90a).
// Arithmetic is fp32; to_float / from_float move fp32, fp16 and bf16 in and out of it
// with round-to-nearest-even, as torch's own casts do. bf16 is converted by hand (the
// HIP 5.2 headers here have no hip_bf16.h; hip_bfloat16.h's type is not trivially
// copyable into a vector), fp16 is clang's _Float16, whose conversions round to even.
#pragma once

#include <hip/hip_runtime.h>

#include <cstddef>
#include <cstdint>

#include "fp8.h"
#include "vec_pack.h"

namespace inference_kernels::rocm {

// Every CDNA GPU runs 64-lane wavefronts; the reductions below assume it.
constexpr int kWave = 64;
#if defined(__HIP_DEVICE_COMPILE__) && defined(__AMDGCN_WAVEFRONT_SIZE__)
static_assert(__AMDGCN_WAVEFRONT_SIZE__ == kWave, "CDNA kernels are written for wave64");
#endif

using Half = _Float16;
struct BFloat16 {
  uint16_t bits;
};

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(Half v) { return static_cast<float>(v); }
__device__ __forceinline__ float to_float(BFloat16 v) {
  return __builtin_bit_cast(float, uint32_t(v.bits) << 16);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ Half from_float<Half>(float v) { return static_cast<Half>(v); }
// c10::BFloat16's rounding: nearest even, NaN -> 0x7FC0.
template <>
__device__ __forceinline__ BFloat16 from_float<BFloat16>(float v) {
  if (v != v) return {0x7FC0};
  const uint32_t u = __builtin_bit_cast(uint32_t, v);
  return {static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)};
}

// float8_e4m3fnuz bits of v (common/fp8.h: nearest even, saturate to +-240, NaN ->
// 0x80). Software encoding: gfx90a has no fp8 instructions, and one integer routine
// keeps both archs and the host test (tests/test_fp8_fnuz.py) bit-identical.
__device__ __forceinline__ uint8_t to_fp8(float v) { return fp8_fnuz_from_float(v); }

using inference_kernels::aligned;
using inference_kernels::Pack;

}  // namespace inference_kernels::rocm
