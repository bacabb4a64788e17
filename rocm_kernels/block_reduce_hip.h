// Block-wide reductions shared by the ROCm norm kernels (torch-free, wave64 CDNA):
// __shfl_xor over 64 lanes, then LDS, one slot per wave (at most 16).
#pragma once

#include <hip/hip_runtime.h>

#include "reduce_ops.h"
#include "vec_io_hip.h"

namespace inference_kernels::rocm {

using inference_kernels::Max;
using inference_kernels::nan_max;
using inference_kernels::Sum;

constexpr int kMaxThreads = 1024;  // 16 waves: the most a CDNA workgroup holds

template <typename Op>
__device__ __forceinline__ float wave_reduce(float v) {
#pragma unroll
  for (int o = kWave / 2; o > 0; o >>= 1) v = Op()(v, __shfl_xor(v, o, kWave));
  return v;
}

// Reduction over the block, returned to every thread. Each Op has its own LDS
// slots, so a sum and a max in one kernel do not race on them.
template <typename Op>
__device__ __forceinline__ float block_reduce(float v) {
  __shared__ float partial[kMaxThreads / kWave];
  __shared__ float total;
  const int lane = threadIdx.x % kWave, wave = threadIdx.x / kWave;
  v = wave_reduce<Op>(v);
  if (lane == 0) partial[wave] = v;
  __syncthreads();
  if (wave == 0) {
    const int nwaves = (blockDim.x + kWave - 1) / kWave;
    v = wave_reduce<Op>(lane < nwaves ? partial[lane] : Op::kIdentity);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

}  // namespace inference_kernels::rocm
