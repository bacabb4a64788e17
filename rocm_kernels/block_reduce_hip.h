// Block-wide reductions shared by the ROCm norm kernels (torch-free, wave64 CDNA):
// __shfl_xor over 64 lanes, then LDS, one slot per wave (at most 16).
#pragma once

#include <hip/hip_runtime.h>

#include "vec_io_hip.h"

namespace inference_kernels::rocm {

constexpr int kMaxThreads = 1024;  // 16 waves: the most a CDNA workgroup holds

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
