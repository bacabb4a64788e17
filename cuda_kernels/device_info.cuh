// Device facts the launchers size their grids by (torch-free).
#pragma once

#include <cuda_runtime.h>

namespace inference_kernels::cuda {

// Streaming multiprocessors of the current device, asked once per device (132 if the
// runtime cannot say).
inline int sm_count() {
  static int counts[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 132;
  if (!counts[dev]) {
    int n = 0;
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    counts[dev] = n > 0 ? n : 132;
  }
  return counts[dev];
}

}  // namespace inference_kernels::cuda
