// FP8 (e4m3fn) constants and the dynamic-scale rule, shared by every backend
// (host C++, CUDA and HIP device code alike).
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define IK_HOST_DEVICE __host__ __device__
#else
#define IK_HOST_DEVICE
#endif

namespace inference_kernels {

// Largest finite float8_e4m3fn (ROCm's e4m3fnuz stops at 240; its backend will
// bring its own constant).
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

}  // namespace inference_kernels
