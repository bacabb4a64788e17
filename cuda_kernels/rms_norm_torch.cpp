// Torch-facing wrappers of rms_norm.cu: check the tensors, pick the stream, launch.
// Compiled by the host C++ compiler, so no torch header goes through nvcc.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "gpu_launchers.h"
#include "torch_binding.h"
#include "torch_checks.h"

namespace {

using namespace inference_kernels;

Rows rows_of(const at::Tensor& t, const char* name) {
  return {const_cast<void*>(t.const_data_ptr()), row_view(t, name).row_stride};
}

void run(const at::Tensor& x, NormParams p) {
  const RowView v = row_view(x, "x");
  TORCH_CHECK(v.rows <= INT32_MAX, "at most 2^31-1 rows are supported, got ", num(v.rows));
  if (v.rows == 0 || v.cols == 0) return;
  p.dtype = gpu_dtype(x);
  p.x = rows_of(x, "x");
  p.rows = v.rows;
  p.d = v.cols;
  const c10::cuda::CUDAGuard guard(x.device());
  C10_CUDA_CHECK(static_cast<cudaError_t>(
      rms_norm_launch(p, c10::cuda::getCurrentCUDAStream().stream())));
}

NormParams params(NormOut mode, const at::Tensor& out, const at::Tensor& weight,
                  const std::optional<at::Tensor>& residual, double eps) {
  NormParams p{};
  p.mode = mode;
  p.out = rows_of(out, "out");
  p.res = residual ? rows_of(*residual, "residual") : Rows{nullptr, 0};
  p.weight = weight.const_data_ptr();
  p.eps = static_cast<float>(eps);
  return p;
}

}  // namespace

void rms_norm_cuda(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rms_norm_args(out, x, weight, eps, c10::DeviceType::CUDA);
  run(x, params(NormOut::kSame, out, weight, std::nullopt, eps));
}

void fused_add_rms_norm_cuda(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
                             double eps) {
  check_fused_add_rms_norm_args(x, residual, weight, eps, c10::DeviceType::CUDA);
  run(x, params(NormOut::kSame, x, weight, residual, eps));
}

void rms_norm_fp8_cuda(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight,
                       const at::Tensor& scale, double eps,
                       const std::optional<at::Tensor>& residual) {
  check_rms_norm_fp8_args(out, x, weight, eps, residual, c10::DeviceType::CUDA);
  check_fp8_scale(scale, x);
  NormParams p = params(NormOut::kFp8Static, out, weight, residual, eps);
  p.scale = scale.const_data_ptr<float>();
  run(x, p);
}

void rms_norm_fp8_dynamic_cuda(at::Tensor& out, at::Tensor& scales, const at::Tensor& x,
                               const at::Tensor& weight, double eps,
                               const std::optional<at::Tensor>& residual) {
  check_rms_norm_fp8_args(out, x, weight, eps, residual, c10::DeviceType::CUDA);
  check_row_scales(scales, x);
  NormParams p = params(NormOut::kFp8Dynamic, out, weight, residual, eps);
  p.row_scales = scales.data_ptr<float>();
  run(x, p);
}
