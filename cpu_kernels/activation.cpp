// silu, and SwiGLU (silu(gate) * up, optionally quantised to fp8) on the CPU.
//
// Rows run in parallel (at::parallel_for); inside a row, ATen's Vectorized types
// do the arithmetic in fp32, two float vectors per step (vec_io.h). Rounding
// follows HF's LlamaMLP (`act_fn(gate_proj(x)) * up_proj(x)` in the model dtype)
// and vLLM's silu_and_mul: s = round(silu(float(gate))), then
// y = round(float(s) * float(up)), round() to the input dtype and
// silu(v) = v / (1 + exp(-v)), the formula of torch's own silu kernel.
#include <ATen/Parallel.h>
#include <c10/util/Float8_e4m3fn.h>

#include <algorithm>
#include <type_traits>

#include "torch_binding.h"
#include "torch_checks.h"
#include "vec_io.h"

namespace {

using namespace inference_kernels;
using namespace inference_kernels::cpu;
using Fp8 = c10::Float8_e4m3fn;

inline fVec silu(const fVec& v) { return v / (fVec(1.0f) + v.neg().exp()); }

template <typename T, typename Out, bool MUL>
void silu_rows(const SiluOperands& a, float inv_scale) {
  auto* out = static_cast<Out*>(a.out.ptr);
  const auto* gate = static_cast<const T*>(a.gate.ptr);
  const auto* up = static_cast<const T*>(a.up.ptr);
  at::parallel_for(0, a.rows, grain(a.d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      Out* o = out + r * a.out.stride;
      const T* g = gate + r * a.gate.stride;
      for (int64_t i = 0; i < a.d; i += kStep) {
        const int64_t n = std::min(kStep, a.d - i);
        const F2 x = load(g + i, n);
        F2 y{silu(x.a), silu(x.b)};
        if constexpr (MUL) {
          const F2 s = round_to<T>(y);  // silu's output is a T tensor in HF
          const F2 u = load(up + r * a.up.stride + i, n);
          y = {s.a * u.a, s.b * u.b};
        }
        if constexpr (std::is_same_v<Out, Fp8>) {
          store_fp8(o + i, round_to<T>(y), n, inv_scale);  // quantise the T-rounded y
        } else {
          store(o + i, y, n);  // rounds to T
        }
      }
    }
  });
}

template <bool MUL, bool FP8>
void run(at::ScalarType dtype, const SiluOperands& a, float inv_scale = 1.0f) {
  if (a.rows == 0 || a.d == 0) return;
  IK_DISPATCH_FLOAT_TYPES(dtype, "silu_cpu", [&] {
    silu_rows<scalar_t, std::conditional_t<FP8, Fp8, scalar_t>, MUL>(a, inv_scale);
  });
}

}  // namespace

void silu_and_mul_cpu(at::Tensor& out, const at::Tensor& x) {
  run<true, false>(x.scalar_type(), silu_and_mul_operands(out, x, nullptr, c10::DeviceType::CPU));
}

void silu_and_mul_fp8_cpu(at::Tensor& out, const at::Tensor& x, const at::Tensor& scale) {
  const SiluOperands a = silu_and_mul_operands(out, x, &scale, c10::DeviceType::CPU);
  // vLLM's convention: multiply by the reciprocal of the scale, computed once.
  run<true, true>(x.scalar_type(), a, 1.0f / *scale.const_data_ptr<float>());
}

void silu_mul_cpu(at::Tensor& out, const at::Tensor& gate, const at::Tensor& up) {
  run<true, false>(gate.scalar_type(), silu_mul_operands(out, gate, up, c10::DeviceType::CPU));
}

void silu_cpu(at::Tensor& out, const at::Tensor& x) {
  run<false, false>(x.scalar_type(), silu_operands(out, x, c10::DeviceType::CPU));
}
