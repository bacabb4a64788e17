// RMSNorm, fused residual-add + RMSNorm, and both with FP8 (e4m3fn) output, on the CPU.
//
// Rows run in parallel (at::parallel_for); inside a row the arithmetic is fp32, in AVX2
// or AVX-512 vectors where the CPU has them (row_simd.h, chosen by cpu_isa(); the fp32 /
// fp16 / bf16 outputs) and in ATen's portable Vectorized types otherwise (the fp8 outputs,
// aarch64, IK_CPU_ISA=baseline), two float vectors per step. Rounding follows HF's
// LlamaRMSNorm and vLLM: the normalised value is rounded to the input dtype
// before it is multiplied by the weight, and the residual sum is rounded to the
// input dtype before it is normalised.
#include <ATen/Parallel.h>
#include <c10/util/Float8_e4m3fn.h>

#include <algorithm>
#include <cmath>

#include "cpu_isa.h"
#include "torch_binding.h"
#include "torch_checks.h"
#include "vec_io.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

using namespace inference_kernels::cpu;

#if defined(__x86_64__)
// The row loops for AVX2 and AVX-512 (namespaces avx2, avx512; row_simd.h), picked by
// cpu_isa() for the fp16/bf16/fp32 output modes.
#define IK_SIMD_FILE "row_simd.h"
#include "simd_builds.h"
#endif

// One step of the normalised row, rounded as HF does: round(round(x * inv_rms) * w).
template <typename T>
inline F2 norm_step(const T* in, const T* w, int64_t n, float inv_rms) {
  const fVec s(inv_rms);
  const F2 x = load(in, n);
  const F2 y = round_to<T>({x.a * s, x.b * s});
  const F2 g = load(w, n);
  return round_to<T>({y.a * g.a, y.b * g.b});
}

inline float inv_rms(float sum_sq, int64_t d, double eps) {
  return 1.0f / std::sqrt(sum_sq / static_cast<float>(d) + static_cast<float>(eps));
}

using Fp8 = c10::Float8_e4m3fn;

// What a call writes: the normalised row in x's dtype, or its fp8 quantisation
// with one static scale, or with a scale per row computed from the row's absmax.
enum class Out { kSame, kFp8Static, kFp8Dynamic };

template <typename T>
struct NormRows {
  const T* x;
  int64_t x_stride;
  T* res;  // optional: res <- round(x + res), and res is what gets normalised
  int64_t res_stride;
  const T* w;
  void* out;  // T (kSame) or Fp8; may be x for kSame
  int64_t out_stride;
  const float* scale;  // kFp8Static: one element
  float* row_scales;   // kFp8Dynamic: one per row
  int64_t rows, d;
  double eps;
};

// Returns the row to normalise and its 1/rms; with a residual, writes the sum first.
template <typename T>
inline const T* prepare_row(const NormRows<T>& a, int64_t r, float* inv) {
  const T* xr = a.x + r * a.x_stride;
  const int64_t d = a.d;
  fVec acc(0.0f);
  if (a.res) {
    T* rr = a.res + r * a.res_stride;
    for (int64_t i = 0; i < d; i += kStep) {
      const int64_t n = std::min(kStep, d - i);
      const F2 p = load(xr + i, n);
      const F2 q = load(rr + i, n);
      const F2 s = round_to<T>({p.a + q.a, p.b + q.b});
      store(rr + i, s, n);
      acc = at::vec::fmadd(s.a, s.a, acc);
      acc = at::vec::fmadd(s.b, s.b, acc);
    }
    *inv = inv_rms(at::vec::vec_reduce_all<float>(std::plus<fVec>(), acc), d, a.eps);
    return rr;
  }
  for (int64_t i = 0; i < d; i += kStep) {
    const F2 v = load(xr + i, std::min(kStep, d - i));
    acc = at::vec::fmadd(v.a, v.a, acc);
    acc = at::vec::fmadd(v.b, v.b, acc);
  }
  *inv = inv_rms(at::vec::vec_reduce_all<float>(std::plus<fVec>(), acc), d, a.eps);
  return xr;
}

#if defined(__x86_64__)
// One row in one instruction set's vectors (row_simd.h): the same values as the baseline
// but for the sum of squares' order.
template <typename T, typename Sum, typename Norm>
void simd_rows(const NormRows<T>& a, Sum sum_squares, Norm norm_row) {
  at::parallel_for(0, a.rows, grain(a.d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = a.x + r * a.x_stride;
      T* rr = a.res ? a.res + r * a.res_stride : nullptr;
      const float inv = inv_rms(sum_squares(xr, rr, a.d), a.d, a.eps);
      norm_row(rr ? rr : xr, a.w, static_cast<T*>(a.out) + r * a.out_stride, a.d, inv);
    }
  });
}
#endif

template <typename T, Out MODE>
void norm_rows(const NormRows<T>& a) {
  const int64_t d = a.d;
#if defined(__x86_64__)
  if constexpr (MODE == Out::kSame) {
    switch (cpu_isa()) {
      case Isa::kAvx512: return simd_rows(a, avx512::sum_squares<T>, avx512::norm_row<T>);
      case Isa::kAvx2: return simd_rows(a, avx2::sum_squares<T>, avx2::norm_row<T>);
      default: break;
    }
  }
#endif
  float inv_scale = 0.0f;
  if constexpr (MODE == Out::kFp8Static) inv_scale = 1.0f / *a.scale;
  at::parallel_for(0, a.rows, grain(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float inv;
      const T* src = prepare_row(a, r, &inv);
      if constexpr (MODE == Out::kSame) {
        T* o = static_cast<T*>(a.out) + r * a.out_stride;
        for (int64_t i = 0; i < d; i += kStep) {
          const int64_t n = std::min(kStep, d - i);
          store(o + i, norm_step(src + i, a.w + i, n, inv), n);
        }
      } else {
        float row_inv_scale = inv_scale;
        if constexpr (MODE == Out::kFp8Dynamic) {
          fVec m(0.0f);
          for (int64_t i = 0; i < d; i += kStep) {
            const F2 y = norm_step(src + i, a.w + i, std::min(kStep, d - i), inv);
            m = at::vec::maximum(m, at::vec::maximum(y.a.abs(), y.b.abs()));
          }
          const float absmax = at::vec::vec_reduce_all<float>(
              [](const fVec& p, const fVec& q) { return at::vec::maximum(p, q); }, m);
          const float scale = inference_kernels::dynamic_fp8_scale(absmax);
          a.row_scales[r] = scale;
          row_inv_scale = 1.0f / scale;
        }
        Fp8* o = static_cast<Fp8*>(a.out) + r * a.out_stride;
        for (int64_t i = 0; i < d; i += kStep) {
          const int64_t n = std::min(kStep, d - i);
          store_fp8(o + i, norm_step(src + i, a.w + i, n, inv), n, row_inv_scale);
        }
      }
    }
  });
}

// Row views and dtype dispatch, after the entry point's checks. `res` (may be null) is
// the residual, written in place; `scale` / `row_scales` as NormRows says.
template <Out MODE>
void run(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, at::Tensor* res,
         double eps, const float* scale = nullptr, float* row_scales = nullptr) {
  using inference_kernels::row_view;
  const auto xv = row_view(x, "x");
  if (xv.rows == 0 || xv.cols == 0) return;
  const int64_t out_stride = row_view(out, "out").row_stride;
  const int64_t res_stride = res ? row_view(*res, "residual").row_stride : 0;
  IK_DISPATCH_FLOAT_TYPES(x.scalar_type(), "rms_norm_cpu", [&] {
    norm_rows<scalar_t, MODE>({x.const_data_ptr<scalar_t>(), xv.row_stride,
                               res ? res->data_ptr<scalar_t>() : nullptr, res_stride,
                               weight.const_data_ptr<scalar_t>(), out.data_ptr(), out_stride, scale,
                               row_scales, xv.rows, xv.cols, eps});
  });
}

at::Tensor* optional_ptr(const std::optional<at::Tensor>& t) {
  return t ? const_cast<at::Tensor*>(&*t) : nullptr;  // written in place, per the schema's `!`
}

}  // namespace

void rms_norm_cpu(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, double eps) {
  inference_kernels::check_rms_norm_args(out, x, weight, eps, c10::DeviceType::CPU);
  run<Out::kSame>(out, x, weight, nullptr, eps);
}

void fused_add_rms_norm_cpu(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
                            double eps) {
  inference_kernels::check_fused_add_rms_norm_args(x, residual, weight, eps, c10::DeviceType::CPU);
  run<Out::kSame>(x, x, weight, &residual, eps);
}

void rms_norm_fp8_cpu(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight,
                      const at::Tensor& scale, double eps,
                      const std::optional<at::Tensor>& residual) {
  inference_kernels::check_rms_norm_fp8_args(out, x, weight, eps, residual, c10::DeviceType::CPU);
  inference_kernels::check_fp8_scale(scale, x);
  run<Out::kFp8Static>(out, x, weight, optional_ptr(residual), eps, scale.const_data_ptr<float>());
}

void rms_norm_fp8_dynamic_cpu(at::Tensor& out, at::Tensor& scales, const at::Tensor& x,
                              const at::Tensor& weight, double eps,
                              const std::optional<at::Tensor>& residual) {
  inference_kernels::check_rms_norm_fp8_args(out, x, weight, eps, residual, c10::DeviceType::CPU);
  inference_kernels::check_row_scales(scales, x);
  run<Out::kFp8Dynamic>(out, x, weight, optional_ptr(residual), eps, nullptr,
                        scales.data_ptr<float>());
}
