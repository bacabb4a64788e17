// FP8 constants and the dynamic-scale rule, shared by every backend (host C++, CUDA
// and HIP device code alike): float8_e4m3fn for the CPU and CUDA, and float8_e4m3fnuz
// (ROCm's format on gfx942/gfx90a) with a software encoder both host and device use.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define IK_HOST_DEVICE __host__ __device__
#else
#define IK_HOST_DEVICE
#endif

namespace inference_kernels {

// Largest finite float8_e4m3fn.
constexpr float kFp8Max = 448.0f;
// vLLM's floor for per-token scales: keeps all-zero rows from dividing by zero.
constexpr float kFp8MinScale = 1.0f / (kFp8Max * 512.0f);

// Saturates to +-kFp8Max but keeps NaN (comparisons with NaN are false; fminf/fmaxf
// would return the bound). Every fp8 output goes through this before conversion, so
// out-of-range behaviour does not depend on the converter (c10's turned values past
// 448 into NaN in older torch, saturates in 2.13; CUDA's satfinite saturates).
IK_HOST_DEVICE inline float clamp_fp8(float v) {
  return v > kFp8Max ? kFp8Max : (v < -kFp8Max ? -kFp8Max : v);
}

// scale = max(absmax / FP8_MAX, 1 / (FP8_MAX * 512)); a NaN absmax stays NaN.
IK_HOST_DEVICE inline float dynamic_fp8_scale(float absmax) {
  const float s = absmax / kFp8Max;
  return (s > kFp8MinScale || s != s) ? s : kFp8MinScale;
}

// ---- float8_e4m3fnuz (torch.float8_e4m3fnuz; ROCm on gfx942 and gfx90a) ----
// Exponent bias 8, 3 mantissa bits, no infinities, no negative zero; the one NaN is
// 0x80 (the bits of "-0"). Largest finite 240 = 0x7F, smallest subnormal 2^-10.
// The dynamic scale divides by the true max, 240 (vLLM uses 224 for fnuz, a margin
// against an old hardware quirk; we keep the format's range, as for e4m3fn's 448).
constexpr float kFp8FnuzMax = 240.0f;
constexpr float kFp8FnuzMinScale = 1.0f / (kFp8FnuzMax * 512.0f);
constexpr uint8_t kFp8FnuzNaN = 0x80;

// Saturates to +-kFp8FnuzMax, keeps NaN (as clamp_fp8).
IK_HOST_DEVICE inline float clamp_fp8_fnuz(float v) {
  return v > kFp8FnuzMax ? kFp8FnuzMax : (v < -kFp8FnuzMax ? -kFp8FnuzMax : v);
}

// max(absmax / 240, 1 / (240 * 512)); a NaN absmax stays NaN.
IK_HOST_DEVICE inline float dynamic_fp8_fnuz_scale(float absmax) {
  const float s = absmax / kFp8FnuzMax;
  return (s > kFp8FnuzMinScale || s != s) ? s : kFp8FnuzMinScale;
}

// fnuz bits of v: round to nearest even (normals and fp8 subnormals), saturate to
// +-240 (torch's own cast turns overflow into NaN; every kernel clamps first
// anyway), NaN -> 0x80, and anything that rounds to zero -> +0 (0x80 is NaN).
// Integer-only, so host and device round identically; no hip_fp8.h needed.
IK_HOST_DEVICE inline uint8_t fp8_fnuz_from_float(float v) {
  const uint32_t u = __builtin_bit_cast(uint32_t, v);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kFp8FnuzNaN;
  uint32_t code;
  if (a >= 0x3C000000u) {  // >= 2^-7, the smallest fp8 normal
    // Round the 23-bit mantissa to 3 bits (ties to even), then rebias 127 -> 8; a
    // mantissa carry moves into the exponent, as it should.
    const uint32_t r = (a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
    code = r - ((127u - 8u) << 3);
    if (code > 0x7Fu) code = 0x7Fu;  // past 240 (and inf): saturate
  } else {
    // Subnormal: v / 2^-10 = mant * 2^(e - 140), rounded to an integer 0..8 (8 is the
    // smallest normal's code). Below 2^-11 (shift >= 25) everything rounds to 0.
    const uint32_t e = a >> 23;
    const uint32_t shift = 140u - e;
    if (shift >= 25u) return 0;
    const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
    const uint32_t half = 1u << (shift - 1);
    const uint32_t rem = mant & ((half << 1) - 1u);
    code = mant >> shift;
    if (rem > half || (rem == half && (code & 1u))) ++code;
  }
  return code ? static_cast<uint8_t>(sign | code) : 0;
}

// Two fnuz codes (bytes 0 and 1 of v) as the bits of two f16 holding value / 128,
// exactly, subnormals included: fnuz and f16 differ by 7 in exponent bias and fnuz's 3
// mantissa bits sit at f16's top 3, so sign | (code & 0x7F) << 7 is the value scaled by
// 2^-7 (an fp8 subnormal becomes an f16 subnormal). The NaN 0x80 comes out as -0; see
// fp8_fnuz_x4_nan_bits / fp8_fnuz_f16x2_restore_nan. The ROCm GEMM's gfx90a path (no fp8
// hardware) converts its operands this way; tests/test_fp8_fnuz.py checks all codes.
IK_HOST_DEVICE inline uint32_t fp8_fnuz_x2_to_f16x2_div128(uint32_t v) {
  const uint32_t u = ((v & 0xFFu) << 8) | ((v & 0xFF00u) << 16);  // bytes to bits 8-15, 24-31
  return (u & 0x80008000u) | ((u >> 1) & 0x3F803F80u);
}

// Non-zero iff any of v's four bytes is the fnuz NaN 0x80 (the zero-byte test of
// v ^ 0x80808080: which bits are set can be off, whether any is set is exact), so the
// words of a vector can be OR-ed before one test.
IK_HOST_DEVICE inline uint32_t fp8_fnuz_x4_nan_bits(uint32_t v) {
  const uint32_t y = v ^ 0x80808080u;
  return (y - 0x01010101u) & ~y & 0x80808080u;
}

// The f16 pair of fp8_fnuz_x2_to_f16x2_div128 with NaN restored: a half that came from
// 0x80 (bits 0x8000, which no other code gives) becomes the f16 NaN 0x7E00.
IK_HOST_DEVICE inline uint32_t fp8_fnuz_f16x2_restore_nan(uint32_t h) {
  if ((h & 0xFFFFu) == 0x8000u) h = (h & 0xFFFF0000u) | 0x7E00u;
  if ((h >> 16) == 0x8000u) h = (h & 0xFFFFu) | 0x7E000000u;
  return h;
}

IK_HOST_DEVICE inline float fp8_fnuz_to_float(uint8_t b) {
  if (b == kFp8FnuzNaN) return __builtin_bit_cast(float, 0x7FC00000u);
  const uint32_t e = (b >> 3) & 0xFu, m = b & 7u;
  const float mag = e == 0 ? float(m) * (1.0f / 1024.0f)  // subnormal: m * 2^-10
                           : __builtin_bit_cast(float, ((e + 127u - 8u) << 23) | (m << 20));
  return (b & 0x80u) ? -mag : mag;
}

}  // namespace inference_kernels
