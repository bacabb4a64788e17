// Torch-facing wrapper of layer_norm.metal for MPS tensors: the checks every backend
// makes (torch_checks.h), then one dispatch (mps_launch.h). Rows may be strided as on
// the CPU (the shader takes x's and out's row strides).
#include "mps_launch.h"
#include "torch_binding.h"

void layer_norm_mps(at::Tensor& out, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                    const std::optional<at::Tensor>& bias, double eps) {
  using namespace inference_kernels;
  using namespace inference_kernels::metal;
  check_layer_norm_args(out, x, weight, bias, eps, kDevice);
  const RowView xv = row_view(x, "x");
  const RowView ov = row_view(out, "out");
  if (xv.rows == 0 || xv.cols == 0) return;
  // A missing weight or bias is flagged off; x stands in at its buffer, never read.
  const uint32_t flags = (weight ? 1u : 0u) | (bias ? 2u : 0u);
  dispatch({"layer_norm" + suffix(x.scalar_type()),
            {Arg::buffer(x), Arg::buffer(weight ? *weight : x), Arg::buffer(bias ? *bias : x),
             Arg::buffer(out), Arg::value(u32(xv.cols, "the hidden size")),
             Arg::value(u32(xv.row_stride, "x's row stride")),
             Arg::value(u32(ov.row_stride, "out's row stride")), Arg::value(flags),
             Arg::value(static_cast<float>(eps))},
            {u32(xv.rows, "the number of rows"), 1, 1}, {row_threads(xv.cols), 1, 1}, false});
}
