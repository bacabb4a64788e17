// Block-wide reductions shared by the CUDA norm kernels (torch-free).
#pragma once

#include <cuda_runtime.h>

#include "reduce_ops.h"

namespace inference_kernels::cuda {

using inference_kernels::Max;
using inference_kernels::nan_max;
using inference_kernels::Sum;

constexpr int kMaxThreads = 1024;

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
