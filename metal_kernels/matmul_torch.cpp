// Torch-facing wrapper of the Metal matmuls for MPS tensors: the checks the CPU op
// makes (torch_checks.h), then one dispatch (mps_launch.h): matmul_simdgroup_f32 (8x8
// simdgroup matrices) for fp32 when M, N and K are multiples of 8, matmul_tiled
// (16x16 threadgroup tiles, any size, fp32/fp16/bf16) otherwise.
#include "mps_launch.h"
#include "torch_binding.h"

void matmul_mps(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  using namespace inference_kernels;
  using namespace inference_kernels::metal;
  check_matmul_args(out, a, b, kDevice);
  check_contiguous(a, "a");
  check_contiguous(b, "b");
  const uint32_t m = u32(a.size(0), "M"), k = u32(a.size(1), "K"), n = u32(b.size(1), "N");
  if (m == 0 || n == 0) return;
  std::vector<Arg> args = {Arg::buffer(a), Arg::buffer(b), Arg::buffer(out), Arg::value(m),
                           Arg::value(n), Arg::value(k)};
  if (a.scalar_type() == at::kFloat && m % 8 == 0 && n % 8 == 0 && k % 8 == 0) {
    dispatch({"matmul_simdgroup_f32", std::move(args), {n / 8, m / 8, 1}, {32, 1, 1}, false});
  } else {  // K = 0 too: the tiles stay zero and out is written as zeros
    dispatch({"matmul_tiled" + suffix(a.scalar_type()), std::move(args),
              {(n + 15) / 16, (m + 15) / 16, 1}, {16, 16, 1}, false});
  }
}
