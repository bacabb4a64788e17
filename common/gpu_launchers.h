// C launchers exported by the GPU kernel files (.cu, .hip). They take raw pointers,
// sizes and a stream, and include no torch header: the torch-facing wrappers
// (compiled by the host C++ compiler) check the tensors and call them.
#pragma once

#include <cstdint>

namespace inference_kernels {

enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// rows x d elements, row_stride elements between rows (last dimension contiguous).
struct Rows {
  void* ptr;
  int64_t stride;
};

// FUSED == (res.ptr != nullptr):
//   res <- round(x + res); out <- weight * round(res * inv_rms)   (out is x)
// otherwise out <- weight * round(x * inv_rms); out may be x.
// Returns the launch status (a cudaError_t / hipError_t as int; 0 is success).
int rms_norm_launch(DType dtype, Rows out, Rows x, Rows res, const void* weight, int64_t rows,
                    int64_t d, float eps, void* stream);

}  // namespace inference_kernels
