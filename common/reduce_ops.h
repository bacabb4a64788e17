// Reduction operators of the GPU kernels, CUDA and HIP alike (device code; include after
// cuda_runtime.h or hip_runtime.h): the block reductions of cuda_kernels/block_reduce.cuh
// and rocm_kernels/block_reduce_hip.h fold with these.
#pragma once

namespace inference_kernels {

// A max that propagates NaN (fmaxf drops it), as the CPU backend's does: a row
// holding NaN gets a NaN scale rather than a scale that ignores it.
__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

struct Sum {
  static constexpr float kIdentity = 0.0f;
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {  // of absolute values, so 0 is the identity
  static constexpr float kIdentity = 0.0f;
  __device__ float operator()(float a, float b) const { return nan_max(a, b); }
};

}  // namespace inference_kernels
