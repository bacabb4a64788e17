// skinny_gemm_fp8(out, a, b, scale_a, scale_b, bias?): the checks every backend makes
// before it touches memory, and the operands its kernels take (gpu_launchers.h).
// Operands are kFp8Type (torch_checks.h): float8_e4m3fn, float8_e4m3fnuz on ROCm.
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <optional>

#include "gpu_launchers.h"
#include "torch_checks.h"

namespace inference_kernels {

// A 2-D operand whose last dimension is contiguous; returns its row stride (elements).
// A single row's stride is never used, so any is accepted (the row length stands in).
inline int64_t gemm_row_stride(const at::Tensor& t, const char* name, const char* shape,
                               const char* hint) {
  TORCH_CHECK(t.dim() == 2, name, " must be 2-D ", shape, ", got shape ", dims_str(t.sizes()));
  TORCH_CHECK(t.size(1) <= 1 || t.stride(1) == 1, name, " must be contiguous along its last dimension ",
              shape, ", got strides ", dims_str(t.strides()), hint);
  if (t.size(0) <= 1) return t.size(1);
  TORCH_CHECK(t.stride(0) >= t.size(1), name, " rows overlap (row stride ", num(t.stride(0)),
              " < row length ", num(t.size(1)), ")");
  return t.stride(0);
}

inline void check_gemm_scale(const at::Tensor& s, const at::Tensor& a, const char* name,
                             int64_t n_allowed) {
  check_same_device(s, a, name, "a");
  TORCH_CHECK(s.scalar_type() == at::kFloat, name, " must be float32, got ",
              c10::toString(s.scalar_type()));
  TORCH_CHECK(s.numel() == 1 || (n_allowed > 1 && s.numel() == n_allowed), name, " must have ",
              n_allowed > 1 ? "1 element (per tensor) or N = " + num(n_allowed) + " (per output channel)"
                            : std::string("1 element"),
              ", got shape ", dims_str(s.sizes()));
  TORCH_CHECK(s.numel() == 1 || s.is_contiguous(), name, " must be contiguous");
}

inline SkinnyGemmParams skinny_gemm_params(at::Tensor& out, const at::Tensor& a,
                                           const at::Tensor& b, const at::Tensor& scale_a,
                                           const at::Tensor& scale_b,
                                           const std::optional<at::Tensor>& bias,
                                           c10::DeviceType type) {
  check_device(a, type, "a");
  TORCH_CHECK(a.scalar_type() == kFp8Type, "a must be ", kFp8Name, ", got ",
              c10::toString(a.scalar_type()));
  const int64_t lda = gemm_row_stride(a, "a", "[M, K]", " (call .contiguous())");
  check_same_device(b, a, "b", "a");
  TORCH_CHECK(b.scalar_type() == kFp8Type, "b must be ", kFp8Name, ", got ",
              c10::toString(b.scalar_type()));
  const int64_t ldb = gemm_row_stride(
      b, "b", "[N, K]", " (nn.Linear's weight layout; a transposed weight needs .t().contiguous())");
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  TORCH_CHECK(b.size(1) == K, "b must have shape [N, K] with K = ", num(K),
              " (a's columns), got ", dims_str(b.sizes()));
  check_same_device(out, a, "out", "a");
  TORCH_CHECK(out.scalar_type() == at::kBFloat16 || out.scalar_type() == at::kHalf,
              "out must be bfloat16 or float16, got ", c10::toString(out.scalar_type()));
  TORCH_CHECK(out.dim() == 2 && out.size(0) == M && out.size(1) == N, "out must have shape [",
              num(M), ", ", num(N), "] ([M, N]), got ", dims_str(out.sizes()));
  const int64_t ldo = gemm_row_stride(out, "out", "[M, N]", "");
  check_gemm_scale(scale_a, a, "scale_a", 1);
  check_gemm_scale(scale_b, a, "scale_b", N);
  if (bias) {
    check_same_device(*bias, a, "bias", "a");
    TORCH_CHECK(bias->scalar_type() == out.scalar_type(), "bias must have out's dtype (",
                c10::toString(out.scalar_type()), "), got ", c10::toString(bias->scalar_type()));
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == N, "bias must have shape [", num(N),
                "], got ", dims_str(bias->sizes()));
    TORCH_CHECK(bias->stride(0) == 1 || N <= 1, "bias must be contiguous, got stride ",
                num(bias->stride(0)));
    check_no_overlap(out, "out", *bias, "bias");
  }
  check_no_overlap(out, "out", a, "a");
  check_no_overlap(out, "out", b, "b");
  check_no_overlap(out, "out", scale_a, "scale_a");
  check_no_overlap(out, "out", scale_b, "scale_b");

  SkinnyGemmParams p{};
  p.out_dtype = out.scalar_type() == at::kBFloat16 ? DType::kBFloat16 : DType::kFloat16;
  p.out = out.data_ptr();
  p.ldo = ldo;
  p.a = a.const_data_ptr();
  p.lda = lda;
  p.b = b.const_data_ptr();
  p.ldb = ldb;
  p.scale_a = scale_a.const_data_ptr<float>();
  p.scale_b = scale_b.const_data_ptr<float>();
  p.scale_b_per_channel = scale_b.numel() > 1;
  p.bias = bias ? bias->const_data_ptr() : nullptr;
  p.M = M;
  p.N = N;
  p.K = K;
  return p;
}

}  // namespace inference_kernels
