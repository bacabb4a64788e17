// FP8 GEMM on the CPU: out[m, n] = sum_k a[m, k] * b[n, k] * scale_a * scale_b[n or 0]
// (+ bias[n]), rounded once to out's dtype. The reference the GPU kernels are held to
// and the CPU backend's implementation, for any M, N, K and row strides.
//
// Both operands are dequantised exactly to fp32 (a 256-entry table), a's rows once, each
// weight row once per thread as it is used; the products of two fp8 values are exact in
// fp32 and are summed in fp32, kVec independent partial sums per dot product (so the
// compiler can vectorise without reassociating), added in a fixed order. Weight rows
// run in parallel (at::parallel_for).
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Half.h>

#include <array>
#include <cstdint>
#include <vector>

#include "skinny_gemm_checks.h"
#include "torch_binding.h"

namespace {

using namespace inference_kernels;

constexpr int64_t kVec = 16;

const std::array<float, 256>& fp8_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = float(c10::Float8_e4m3fn(uint8_t(i), c10::Float8_e4m3fn::from_bits()));
    return t;
  }();
  return table;
}

float dot(const float* x, const float* w, int64_t k) {
  float part[kVec] = {};
  int64_t i = 0;
  for (; i + kVec <= k; i += kVec) {
    for (int64_t j = 0; j < kVec; ++j) part[j] += x[i + j] * w[i + j];
  }
  for (int64_t j = 0; i + j < k; ++j) part[j] += x[i + j] * w[i + j];
  float sum = 0.0f;
  for (int64_t j = 0; j < kVec; ++j) sum += part[j];
  return sum;
}

template <typename OutT>
void gemm(const SkinnyGemmParams& p) {
  const auto& table = fp8_table();
  const int64_t M = p.M, N = p.N, K = p.K;
  const auto* a = static_cast<const uint8_t*>(p.a);
  const auto* b = static_cast<const uint8_t*>(p.b);
  std::vector<float> af(static_cast<size_t>(M * K));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) af[m * K + k] = table[a[m * p.lda + k]];
  }
  const float sa = *p.scale_a;
  const auto* bias = static_cast<const OutT*>(p.bias);
  auto* out = static_cast<OutT*>(p.out);
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, M * K));
  at::parallel_for(0, N, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> wf(static_cast<size_t>(K));
    for (int64_t n = begin; n < end; ++n) {
      for (int64_t k = 0; k < K; ++k) wf[k] = table[b[n * p.ldb + k]];
      const float scale = sa * p.scale_b[p.scale_b_per_channel ? n : 0];
      const float add = bias ? float(bias[n]) : 0.0f;
      for (int64_t m = 0; m < M; ++m) {
        out[m * p.ldo + n] = OutT(dot(af.data() + m * K, wf.data(), K) * scale + add);
      }
    }
  });
}

}  // namespace

// config (the CUDA kernel's work split) means nothing here and is ignored.
void skinny_gemm_fp8_cpu(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                         const at::Tensor& scale_a, const at::Tensor& scale_b,
                         const std::optional<at::Tensor>& bias, at::IntArrayRef /*config*/) {
  const SkinnyGemmParams p = skinny_gemm_params(out, a, b, scale_a, scale_b, bias, c10::DeviceType::CPU);
  if (p.M == 0 || p.N == 0) return;
  if (p.out_dtype == DType::kBFloat16) {
    gemm<c10::BFloat16>(p);
  } else {
    gemm<c10::Half>(p);
  }
}
