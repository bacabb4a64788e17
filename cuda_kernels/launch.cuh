// Kernel launches with programmatic dependent launch (PDL, sm_90) across ops, when asked.
//
// In a stream (or a CUDA graph) each kernel normally starts only after the one before it
// has finished and the runtime has noticed: at decode sizes, where a kernel is ~1-2 us,
// that gap is a large part of its time. Launched as a programmatic dependent, a kernel's
// blocks are placed while the previous kernel still runs (once every block of it has
// called pdl_launch_dependents or exited) and wait in pdl_wait_primary until its writes
// are visible. A kernel launched this way must call pdl_wait_primary before its first
// global memory access; without the attribute both calls are no-ops.
//
// EXPERIMENT: SwiGLU only, off unless IK_PDL=1 (read at each launch, so a benchmark can
// set it around a graph capture and compare in one process).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <utility>

namespace inference_kernels {
namespace cuda {

inline bool pdl_requested() {
  const char* v = std::getenv("IK_PDL");
  return v && v[0] == '1';
}

// kernel<<<grid, block, 0, stream>>>(args...), as a programmatic dependent when pdl; a
// runtime that refuses the attribute gets a plain launch.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, bool pdl,
                          Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  if (pdl) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
  if (e != cudaSuccess && pdl) {
    (void)cudaGetLastError();
    cfg.numAttrs = 0;
    e = cudaLaunchKernelEx(&cfg, kernel, args...);
  }
  return e;
}

}  // namespace cuda
}  // namespace inference_kernels
