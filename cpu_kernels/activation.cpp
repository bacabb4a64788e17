// silu, and SwiGLU (silu(gate) * up, optionally quantised to fp8) on the CPU.
//
// Rows run in parallel (at::parallel_for); inside a row the arithmetic is fp32, in AVX2 or
// AVX-512 vectors where the CPU has them (row_simd.h, chosen by cpu_isa(); its exp is
// within about 1 ulp of std::exp; the fp8 output quantises that row as silu_mul gives it)
// and in ATen's portable Vectorized types otherwise (aarch64, IK_CPU_ISA=baseline). Rounding
// follows HF's LlamaMLP (`act_fn(gate_proj(x)) * up_proj(x)` in the model dtype)
// and vLLM's silu_and_mul: s = round(silu(float(gate))), then
// y = round(float(s) * float(up)), round() to the input dtype and
// silu(v) = v / (1 + exp(-v)), the formula of torch's own silu kernel.
#include <ATen/Parallel.h>
#include <c10/util/Float8_e4m3fn.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "cpu_isa.h"
#include "torch_binding.h"
#include "torch_checks.h"
#include "vec_io.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

using namespace inference_kernels;
using namespace inference_kernels::cpu;
using Fp8 = c10::Float8_e4m3fn;

#if defined(__x86_64__)
// The row loops for AVX2 and AVX-512 (namespaces avx2, avx512; row_simd.h), picked by
// cpu_isa() where the output is the input's dtype.
#define IK_SIMD_FILE "row_simd.h"
#include "simd_builds.h"
#endif

inline fVec silu(const fVec& v) { return v / (fVec(1.0f) + v.neg().exp()); }

template <typename T, typename Out, bool MUL>
void silu_rows(const SiluOperands& a, float inv_scale) {
  auto* out = static_cast<Out*>(a.out.ptr);
  const auto* gate = static_cast<const T*>(a.gate.ptr);
  const auto* up = static_cast<const T*>(a.up.ptr);
#if defined(__x86_64__)
  if (const Isa isa = cpu_isa(); isa != Isa::kBaseline) {
    const auto row = isa == Isa::kAvx512 ? avx512::silu_row<T, MUL> : avx2::silu_row<T, MUL>;
    at::parallel_for(0, a.rows, grain(a.d), [&](int64_t begin, int64_t end) {
      // fp8: the row in T first (the values silu_mul gives), then quantised as below.
      std::vector<T> tmp(std::is_same_v<Out, Fp8> ? a.d : 0);
      for (int64_t r = begin; r < end; ++r) {
        Out* o = out + r * a.out.stride;
        const T* u = MUL ? up + r * a.up.stride : nullptr;
        if constexpr (std::is_same_v<Out, Fp8>) {
          row(gate + r * a.gate.stride, u, tmp.data(), a.d);
          for (int64_t i = 0; i < a.d; i += kStep) {
            const int64_t n = std::min(kStep, a.d - i);
            store_fp8(o + i, load(tmp.data() + i, n), n, inv_scale);
          }
        } else {
          row(gate + r * a.gate.stride, u, o, a.d);
        }
      }
    });
    return;
  }
#endif
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
