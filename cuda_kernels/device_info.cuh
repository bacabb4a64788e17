// Device facts the launchers size their grids by (torch-free).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace inference_kernels::cuda {

// Per-device caches below hold kDeviceSlots entries; device_slot() is the current
// device's entry, -1 if the runtime cannot say or there are more devices (no caching).
constexpr int kDeviceSlots = 64;
inline int device_slot() {
  int dev = 0;
  return cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < kDeviceSlots ? dev : -1;
}

// A device attribute of the current device, asked once per device (0 if the runtime
// cannot say).
template <cudaDeviceAttr Attr>
int device_attribute_once() {
  static int values[kDeviceSlots] = {};
  const int dev = device_slot();
  if (dev < 0) return 0;
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

// resident_blocks of a kernel launched at one block size and dynamic shared memory (set
// with max_dynamic_smem_once first where past 48 KB), asked once per device (as
// sm_count): for launch rules on every call.
template <auto Kernel, int Threads, size_t Smem = 0>
int64_t resident_blocks_once() {
  static int64_t counts[kDeviceSlots] = {};
  const int dev = device_slot();
  if (dev < 0) return resident_blocks(Kernel, Threads, Smem);
  if (!counts[dev]) counts[dev] = resident_blocks(Kernel, Threads, Smem);
  return counts[dev];
}

// Lets Kernel take `bytes` of dynamic shared memory (past the default 48 KB), once per
// device: the attribute never changes, so launches on every call need not set it again.
template <auto Kernel>
cudaError_t max_dynamic_smem_once(int bytes) {
  static bool done[kDeviceSlots] = {};
  const int dev = device_slot();
  if (dev >= 0 && done[dev]) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess && dev >= 0) done[dev] = true;
  return e;
}

}  // namespace inference_kernels::cuda
