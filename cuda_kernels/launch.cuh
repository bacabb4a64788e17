// Kernel launches as programmatic dependents (PDL, sm_90), when asked: an experiment.
//
// In a stream (or a CUDA graph) each kernel normally starts only after the one before it
// has finished and the front end has noticed: at decode sizes, where a kernel is ~1-2 us,
// that gap is a large part of its time. Launched as a programmatic dependent, a kernel's
// blocks are placed while the previous kernel still runs (once every block of it has
// called pdl_launch_dependents or exited) and wait in pdl_wait_primary until its writes
// are visible. Such a kernel must call pdl_wait_primary before its first global memory
// access, reads and writes.
//
// The kernels that take part come in separate instantiations (a template parameter
// PdlMode): with the two instructions in the default kernels, even without the launch
// attribute, SwiGLU at 128 rows ran 0.2-1.1 us slower (s38b, s38c).
//
// IK_PDL (read at each launch, so that a benchmark can set it around a graph capture and
// compare in one process): unset or 0, plain launches; 1, let the next kernel launch as
// soon as this one starts (kPdlEarly); 2, once this one's stores are issued (kPdlLate).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>

#include "ptx.cuh"

namespace inference_kernels {
namespace cuda {

enum PdlMode : int { kPdlOff = 0, kPdlEarly = 1, kPdlLate = 2 };

inline PdlMode pdl_requested() {
  const char* v = std::getenv("IK_PDL");
  if (!v) return kPdlOff;
  return v[0] == '1' ? kPdlEarly : v[0] == '2' ? kPdlLate : kPdlOff;
}

// At a kernel's start: wait for the primary (before any global access) and, early, let
// the dependent launch.
template <int PDL>
__device__ __forceinline__ void pdl_begin() {
  if constexpr (PDL != kPdlOff) pdl_wait_primary();
  if constexpr (PDL == kPdlEarly) pdl_launch_dependents();
}

// After a thread's last store: late, let the dependent launch.
template <int PDL>
__device__ __forceinline__ void pdl_end() {
  if constexpr (PDL == kPdlLate) pdl_launch_dependents();
}

// kernel<<<grid, block, 0, stream>>>(args...), as a programmatic dependent when pdl; a
// runtime that refuses the attribute gets a plain launch (the kernel's PDL instructions
// are then no-ops).
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, bool pdl,
                          Args... args) {
  if (!pdl) {
    kernel<<<grid, block, 0, stream>>>(args...);
    return cudaSuccess;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    cfg.numAttrs = 0;
    e = cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...);
  }
  return e;
}

}  // namespace cuda
}  // namespace inference_kernels
