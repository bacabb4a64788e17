// Device facts the launchers size their grids by (torch-free).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace inference_kernels::cuda {

// A device attribute of the current device, asked once per device (0 if the runtime
// cannot say).
template <cudaDeviceAttr Attr>
int device_attribute_once() {
  static int values[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
  if (!values[dev]) {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, Attr, dev) != cudaSuccess) (void)cudaGetLastError();
    values[dev] = v > 0 ? v : -1;  // -1: asked, unknown
  }
  return values[dev] > 0 ? values[dev] : 0;
}

// Streaming multiprocessors of the current device (132 if the runtime cannot say).
inline int sm_count() {
  const int n = device_attribute_once<cudaDevAttrMultiProcessorCount>();
  return n > 0 ? n : 132;
}

// Blocks of `threads` threads (smem bytes of dynamic shared memory) that the current
// device holds at once; 0 if the runtime cannot say.
template <typename Kernel>
int64_t resident_blocks(Kernel* kernel, int threads, size_t smem = 0) {
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess) return 0;
  return int64_t{per_sm} * sm_count();
}

// resident_blocks of a kernel launched at one block size without dynamic shared memory,
// asked once per device (as sm_count): for launch rules on every call.
template <auto Kernel, int Threads>
int64_t resident_blocks_once() {
  static int64_t counts[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return resident_blocks(Kernel, Threads);
  if (!counts[dev]) counts[dev] = resident_blocks(Kernel, Threads);
  return counts[dev];
}

}  // namespace inference_kernels::cuda
