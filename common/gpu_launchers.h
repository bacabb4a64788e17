// C launchers exported by the GPU kernel files (.cu, .hip). They take raw pointers,
// sizes and a stream, and include no torch header: the torch-facing wrappers
// (compiled by the host C++ compiler) check the tensors and call them. The CPU
// kernels take the same operand structs, built by the same checks (torch_checks.h).
#pragma once

#include <cstdint>

namespace inference_kernels {

// Activation dtypes, and the fp8 format the *_fp8 ops write (float8_e4m3fn).
enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kFloat8E4M3 = 3 };

// The largest finite float8_e4m3fn (it has no infinities): fp8 outputs are
// clamped to +-kFp8E4M3Max before they are converted.
constexpr float kFp8E4M3Max = 448.0f;

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

// silu and SwiGLU over `rows` rows of d elements. up.ptr == nullptr: plain silu.
// silu_and_mul passes x twice: gate at column 0, up at column d of the same rows.
struct SiluOperands {
  Rows out, gate, up;
  int64_t rows, d;
};

// With s = round(silu(float(gate))) and round() to `dtype`, as HF's LlamaMLP and vLLM:
//   up.ptr == nullptr:          out <- s
//   out_dtype == dtype:         out <- round(float(s) * float(up))
//   out_dtype == kFloat8E4M3:   out <- fp8(clamp(float(y) * (1 / *scale), +-448)),
//                               y the rounded product; scale points to one float in
//                               device memory (read by the kernel: no host sync).
// Returns the launch status (0 is success).
int silu_mul_launch(DType dtype, DType out_dtype, const SiluOperands& a, const float* scale,
                    void* stream);

}  // namespace inference_kernels
