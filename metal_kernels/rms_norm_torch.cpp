// Torch-facing wrappers of rms_norm.metal for MPS tensors: the checks every backend
// makes (torch_checks.h), then one dispatch (mps_launch.h). The shader indexes dense
// rows, so x, out and residual must be contiguous.
#include "mps_launch.h"
#include "torch_binding.h"

namespace {

using namespace inference_kernels;
using namespace inference_kernels::metal;

// One threadgroup per row; the shader's buffers after the tensors are d and eps.
void run(const std::string& kernel, const at::Tensor& x, std::vector<Arg> tensors, double eps) {
  const int64_t d = x.size(-1), rows = d == 0 ? 0 : x.numel() / d;
  if (rows == 0) return;
  tensors.push_back(Arg::value(u32(d, "the hidden size")));
  tensors.push_back(Arg::value(static_cast<float>(eps)));
  dispatch({kernel + suffix(x.scalar_type()), std::move(tensors),
            {u32(rows, "the number of rows"), 1, 1}, {row_threads(d), 1, 1}, false});
}

}  // namespace

void rms_norm_mps(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rms_norm_args(out, x, weight, eps, kDevice);
  check_contiguous(x, "x");
  check_contiguous(out, "out");
  run("rms_norm", x, {Arg::buffer(x), Arg::buffer(weight), Arg::buffer(out)}, eps);
}

void fused_add_rms_norm_mps(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
                            double eps) {
  check_fused_add_rms_norm_args(x, residual, weight, eps, kDevice);
  check_contiguous(x, "x");
  check_contiguous(residual, "residual");
  run("fused_add_rms_norm", x, {Arg::buffer(x), Arg::buffer(residual), Arg::buffer(weight)}, eps);
}
