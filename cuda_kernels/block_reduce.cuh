// Block-wide reductions shared by the CUDA norm kernels (torch-free).
#pragma once

#include <cuda_runtime.h>

namespace inference_kernels::cuda {

constexpr int kMaxThreads = 1024;

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

// Reduction over the block, returned to every thread. Each Op has its own shared
// storage, so a sum and a max in one kernel do not race on it. Two calls with one
// Op in a row are safe too: every thread reads `total` before it reaches the next
// call's first barrier, and `total` is only written after that barrier.
template <typename Op>
__device__ __forceinline__ float block_reduce(float v) {
  __shared__ float partial[kMaxThreads / 32];
  __shared__ float total;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Op()(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int nwarps = (blockDim.x + 31) / 32;
    v = lane < nwarps ? partial[lane] : Op::kIdentity;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = Op()(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

}  // namespace inference_kernels::cuda
