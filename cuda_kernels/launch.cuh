// Every CUDA kernel of the package is launched here, most as programmatic dependents of the
// kernel before them in the stream (sm_90's programmatic dependent launch), torch-free.
//
// Why: a decode step is a chain of short kernels (norm, GEMM, activation, GEMM), and
// between two of them the GPU otherwise idles for the next grid's launch and its first
// loads' latency. A dependent grid may start while its primary still runs; it must not
// touch the primary's data until griddepcontrol.wait returns, which is when the primary
// has finished and its writes are visible.
//
// The contract every kernel launched here keeps (ptx.cuh's pdl_enter, first thing):
// - griddepcontrol.wait before its first global load or store: no read of what the
//   kernel before wrote, and no write over what it still reads.
// - then griddepcontrol.launch_dependents, so the next kernel's blocks may take SMs as
//   this grid's blocks end. Waiting first means a kernel only ever overlaps the one kernel
//   right before it, never one further back.
// - Before the wait, only L2 prefetches of the weights (ptx.cuh's prefetch_l2): a hint,
//   never a stale copy (L2 is where writes land), so a weight the kernel before wrote is
//   still read correctly.
// A kernel from outside the package (torch's) never triggers early: ours then start when
// its blocks have ended, and still wait for its writes. IK_PDL=0 (read at each launch, as
// benchmarks compare in one process) launches every kernel plainly.
//
// Which kernels are dependents (LaunchShape::dependent), from the fifty-sixth session's
// H100 runs (BENCHMARKS.md): the norms, SwiGLU, LayerNorm, the k-quant gemv and the skinny
// GEMM's convert 7 (and convert 3's GEMM after its pre-pass, as before). The Q4_K decode
// layer took 67.9-68.2 us against 76.5-76.7 without; convert 7 at 2304 x 16384, M = 1,
// 13.34-13.38 against 13.65-13.67 one GEMM after another. The skinny GEMM's other converts
// launch plainly: as dependents (with L2 prefetches of their first tiles) one after another
// they took up to 16% longer (convert 6 split over clusters at 2304 x 16384, M = 8: 18.3
// against 15.8 us; convert 8 at 4096 x 4096: 9.8 against 8.7). The k-quant gemv prefetches
// one tile block a warp (q4k.cu's prefetch_blocks says why not more).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>

namespace inference_kernels::cuda {

// IK_PDL: 0 launches every kernel plainly, 2 every kernel as a dependent (the plain ones too:
// an experiment switch for A/B runs), anything else the choice below.
inline char pdl_mode() {
  const char* v = std::getenv("IK_PDL");
  return v && (v[0] == '0' || v[0] == '2') ? v[0] : '1';
}

struct LaunchShape {
  dim3 grid, block;
  size_t smem = 0;  // dynamic shared memory, bytes
  cudaStream_t stream = nullptr;
  unsigned cluster = 1;  // blocks a cluster, along x
  bool dependent = true;  // false: a plain launch (the kernel still keeps the contract)
};

template <typename... Params, typename... Args>
cudaError_t launch_kernel(const LaunchShape& s, void (*kernel)(Params...), Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = s.grid;
  cfg.blockDim = s.block;
  cfg.dynamicSmemBytes = s.smem;
  cfg.stream = s.stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (s.cluster > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = s.cluster;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  const char mode = pdl_mode();
  const bool pdl = mode == '2' || (s.dependent && mode == '1');
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
  if (e != cudaSuccess && pdl) {  // a runtime that refuses the dependent launch: a plain one
    (void)cudaGetLastError();
    cfg.numAttrs = n - 1;
    e = cudaLaunchKernelEx(&cfg, kernel, args...);
  }
  return e;
}

}  // namespace inference_kernels::cuda
