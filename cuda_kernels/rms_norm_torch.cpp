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

void run(const at::Tensor& x, Rows out, Rows xr, Rows res, const at::Tensor& weight,
         const RowView& v, double eps) {
  TORCH_CHECK(v.rows <= INT32_MAX, "at most 2^31-1 rows are supported, got ", num(v.rows));
  if (v.rows == 0 || v.cols == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  const int err = rms_norm_launch(gpu_dtype(x), out, xr, res, weight.const_data_ptr(), v.rows,
                                  v.cols, static_cast<float>(eps),
                                  c10::cuda::getCurrentCUDAStream().stream());
  C10_CUDA_CHECK(static_cast<cudaError_t>(err));
}

}  // namespace

void rms_norm_cuda(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rms_norm_args(out, x, weight, eps, c10::DeviceType::CUDA);
  const RowView xv = row_view(x, "x");
  const RowView ov = row_view(out, "out");
  run(x, {out.data_ptr(), ov.row_stride}, {const_cast<void*>(x.const_data_ptr()), xv.row_stride},
      {nullptr, 0}, weight, xv, eps);
}

void fused_add_rms_norm_cuda(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
                             double eps) {
  check_fused_add_rms_norm_args(x, residual, weight, eps, c10::DeviceType::CUDA);
  const RowView xv = row_view(x, "x");
  const RowView rv = row_view(residual, "residual");
  run(x, {x.data_ptr(), xv.row_stride}, {x.data_ptr(), xv.row_stride},
      {residual.data_ptr(), rv.row_stride}, weight, xv, eps);
}
