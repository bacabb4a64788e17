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

// Two 16-bit values in one 32-bit word (the first in the low half): to and from fp32, bit
// for bit as to_float / from_float (pack rounds both in one cvt, F2FP.PACK_AB, where
// from_float costs a cvt each), and their product and sum rounded once by one packed
// instruction (HMUL2 / HADD2). Those equal the fp32 operation rounded to T, the
// package's documented rounding, so a pair takes 1 instruction instead of 7 (two
// unpacks, two fp32 ops, a pack): fp32 holds the product of two 16-bit significands
// exactly, and its 24 bits make a sum's double rounding innocuous (>= 2p + 2 for p = 11
// and 8). The one exception: a bf16 product below 2^-126, which fp32 rounds to a
// subnormal before T does (here rounded once, as IEEE bf16 arithmetic would).
// Pair16Ops: the word as the packed type (H2: __half2 or __nv_bfloat162) and back, and
// the packed ops (__hmul2_rn / __hadd2_rn round once, never contracted into an FMA).
template <typename H2>
struct Pair16Ops {
  static __device__ __forceinline__ uint32_t bits(H2 h) {
    uint32_t u;
    __builtin_memcpy(&u, &h, 4);
    return u;
  }
  static __device__ __forceinline__ H2 h2(uint32_t u) {
    H2 h;
    __builtin_memcpy(&h, &u, 4);
    return h;
  }
  static __device__ __forceinline__ uint32_t mul(uint32_t a, uint32_t b) { return bits(__hmul2_rn(h2(a), h2(b))); }
  static __device__ __forceinline__ uint32_t add(uint32_t a, uint32_t b) { return bits(__hadd2_rn(h2(a), h2(b))); }
};
template <typename T>
struct Pair16;
template <>
struct Pair16<__nv_bfloat16> : Pair16Ops<__nv_bfloat162> {
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) { return bits(__floats2bfloat162_rn(lo, hi)); }
};
template <>
struct Pair16<__half> : Pair16Ops<__half2> {
  static __device__ __forceinline__ float2 unpack(uint32_t u) { return __half22float2(h2(u)); }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) { return bits(__floats2half2_rn(lo, hi)); }
};

// float8_e4m3fn bits of v: clamp_fp8 (saturate, keep NaN), then cvt.rn.satfinite,
// which rounds to nearest even as c10::Float8_e4m3fn does on the CPU (ties and fp8
// subnormals alike).
__device__ __forceinline__ __nv_fp8_storage_t to_fp8(float v) {
  return __nv_cvt_float_to_fp8(clamp_fp8(v), __NV_SATFINITE, __NV_E4M3);
}

using inference_kernels::aligned;
using inference_kernels::Pack;

}  // namespace inference_kernels::cuda
