// Torch-facing wrappers of q4k.metal (Q4_K and Q6_K gemv) for MPS tensors: the checks
// the CPU op makes (torch_checks.h), then one dispatch (mps_launch.h). x is made
// contiguous (at most 8 rows: a small copy, as the CPU op makes an fp32 one).
#include "ggml_blocks.h"
#include "mps_launch.h"
#include "torch_binding.h"

namespace {

using namespace inference_kernels;
using namespace inference_kernels::metal;

constexpr uint64_t kRowsPerSimd = 2;  // q4k.metal's kRowsPerSimd
constexpr uint64_t kSimdGroups = 4;   // per threadgroup: 8 rows of W, 128 threads

template <typename Block>
void gemv(const char* kernel, const char* fmt, at::Tensor& out, const at::Tensor& x,
          const at::Tensor& q) {
  const int64_t blocks = check_kquant_gemv_args(out, x, q, sizeof(Block), alignof(Block), fmt,
                                                kDevice);
  const int64_t m = x.size(0), n = q.size(0);
  if (n == 0) return;
  const at::Tensor xc = x.contiguous();
  const uint64_t rows = kRowsPerSimd * kSimdGroups;
  dispatch({std::string(kernel) + suffix(x.scalar_type()),
            {Arg::buffer(xc), Arg::buffer(q), Arg::buffer(out), Arg::value(u32(m, "M")),
             Arg::value(u32(n, "N")), Arg::value(u32(blocks * ggml::kQK, "K"))},
            {(u32(n, "N") + rows - 1) / rows, 1, 1}, {32 * kSimdGroups, 1, 1}, false});
}

}  // namespace

void q4k_gemv_mps(at::Tensor& out, const at::Tensor& x, const at::Tensor& q) {
  gemv<ggml::BlockQ4K>("q4k_gemv", "Q4_K", out, x, q);
}

void q6k_gemv_mps(at::Tensor& out, const at::Tensor& x, const at::Tensor& q) {
  gemv<ggml::BlockQ6K>("q6k_gemv", "Q6_K", out, x, q);
}
