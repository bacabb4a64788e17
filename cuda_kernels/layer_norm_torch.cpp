// Torch-facing wrapper of layer_norm.cu (and rocm_kernels/layer_norm.hip): check the
// tensors, pick the stream, launch. Compiled by the host C++ compiler, so no torch
// header goes through nvcc.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "gpu_launchers.h"
#include "torch_binding.h"
#include "torch_checks.h"

void layer_norm_cuda(at::Tensor& out, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                     const std::optional<at::Tensor>& bias, double eps) {
  using namespace inference_kernels;
  check_layer_norm_args(out, x, weight, bias, eps, c10::DeviceType::CUDA);
  const RowView xv = row_view(x, "x");
  const RowView ov = row_view(out, "out");
  TORCH_CHECK(xv.rows <= INT32_MAX, "at most 2^31-1 rows are supported, got ", num(xv.rows));
  TORCH_CHECK(xv.cols <= INT32_MAX, "rows of at most 2^31-1 elements are supported, got ",
              num(xv.cols));
  if (xv.rows == 0 || xv.cols == 0) return;
  LayerNormParams p{};
  p.dtype = gpu_dtype(x);
  p.out = out_rows(out, ov);
  p.x = in_rows(x, xv);
  p.weight = weight ? weight->const_data_ptr() : nullptr;
  p.bias = bias ? bias->const_data_ptr() : nullptr;
  p.rows = xv.rows;
  p.d = xv.cols;
  p.eps = static_cast<float>(eps);
  const c10::cuda::CUDAGuard guard(x.device());
  C10_CUDA_CHECK(static_cast<cudaError_t>(
      layer_norm_launch(p, c10::cuda::getCurrentCUDAStream().stream())));
}
