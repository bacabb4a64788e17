// The SwiGLU launcher with an explicit block shape, for the tuning program
// (benchmarks/tune_norms.cu); the package calls silu_mul_launch (gpu_launchers.h).
#pragma once

#include "gpu_launchers.h"

namespace inference_kernels {
namespace cuda {
// threads: a block's threads (32..512, whole warps), spread over a row and then over
// further rows; vec_bytes: the vector a thread loads of each input (4, 8 or 16 bytes);
// lean: silu_mul_lean (one vector a thread, up to 256 threads, rows up to 65535 and
// vectors of two elements at least), else the general kernel.
struct SiluConfig {
  int threads, vec_bytes;
  bool lean = false;
};
}  // namespace cuda

// forced == nullptr: the default shape.
int silu_mul_launch_with(DType dtype, DType out_dtype, const SiluOperands& a, const float* scale,
                         const cuda::SiluConfig* forced, void* stream);
}  // namespace inference_kernels
