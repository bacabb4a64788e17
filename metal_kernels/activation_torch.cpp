// Torch-facing wrappers of activation.metal for MPS tensors: the checks every backend
// makes (torch_checks.h, which also measure the row strides), then one dispatch over
// (d, rows) threads (mps_launch.h). silu_and_mul binds x twice: gate at x's offset,
// up d elements further, both with x's row stride.
#include "mps_launch.h"
#include "torch_binding.h"

namespace {

using namespace inference_kernels;
using namespace inference_kernels::metal;

// (d, rows) threads in threadgroups of 256: a row's columns, then as many rows as fit.
void run(const std::string& kernel, at::ScalarType dtype, const SiluOperands& a,
         std::vector<Arg> args) {
  if (a.rows == 0 || a.d == 0) return;
  const uint64_t tx = row_threads(a.d);
  dispatch({kernel + suffix(dtype), std::move(args),
            {u32(a.d, "the hidden size"), u32(a.rows, "the number of rows"), 1},
            {tx, 256 / tx, 1}, true});
}

Arg stride(const Rows& r, const char* what) { return Arg::value(u32(r.stride, what)); }

}  // namespace

void silu_and_mul_mps(at::Tensor& out, const at::Tensor& x) {
  const SiluOperands a = silu_and_mul_operands(out, x, nullptr, kDevice);
  run("silu_mul", x.scalar_type(), a,
      {Arg::buffer(out), Arg::buffer(x), Arg::buffer(x, a.d), Arg::value(u32(a.d, "d")),
       stride(a.out, "out's row stride"), stride(a.gate, "x's row stride"),
       stride(a.up, "x's row stride")});
}

void silu_mul_mps(at::Tensor& out, const at::Tensor& gate, const at::Tensor& up) {
  const SiluOperands a = silu_mul_operands(out, gate, up, kDevice);
  run("silu_mul", gate.scalar_type(), a,
      {Arg::buffer(out), Arg::buffer(gate), Arg::buffer(up), Arg::value(u32(a.d, "d")),
       stride(a.out, "out's row stride"), stride(a.gate, "gate's row stride"),
       stride(a.up, "up's row stride")});
}

void silu_mps(at::Tensor& out, const at::Tensor& x) {
  const SiluOperands a = silu_operands(out, x, kDevice);
  run("silu", x.scalar_type(), a,
      {Arg::buffer(out), Arg::buffer(x), Arg::value(u32(a.d, "d")),
       stride(a.out, "out's row stride"), stride(a.gate, "x's row stride")});
}
