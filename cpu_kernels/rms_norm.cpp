// RMSNorm and fused residual-add + RMSNorm on the CPU.
//
// Rows run in parallel (at::parallel_for); inside a row, ATen's Vectorized types
// do the arithmetic in fp32, two float vectors per step. Rounding follows HF's
// LlamaRMSNorm and vLLM: the normalised value is rounded to the input dtype
// before it is multiplied by the weight, and the residual sum is rounded to the
// input dtype before it is normalised.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "torch_binding.h"
#include "torch_checks.h"
#include "vec_io.h"

namespace {

using namespace inference_kernels::cpu;

template <typename T>
inline void normalise_row(T* out, const T* in, const T* w, int64_t d, float inv_rms) {
  const fVec s(inv_rms);
  for (int64_t i = 0; i < d; i += kStep) {
    const int64_t n = std::min(kStep, d - i);
    const F2 x = load(in + i, n);
    const F2 y = round_to<T>({x.a * s, x.b * s});
    const F2 g = load(w + i, n);
    store(out + i, F2{y.a * g.a, y.b * g.b}, n);
  }
}

inline float inv_rms(float sum_sq, int64_t d, double eps) {
  return 1.0f / std::sqrt(sum_sq / static_cast<float>(d) + static_cast<float>(eps));
}

template <typename T>
void rms_norm_rows(T* out, int64_t out_stride, const T* x, int64_t x_stride, const T* w,
                   int64_t rows, int64_t d, double eps) {
  at::parallel_for(0, rows, grain(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * x_stride;
      fVec acc(0.0f);
      for (int64_t i = 0; i < d; i += kStep) {
        const F2 v = load(xr + i, std::min(kStep, d - i));
        acc = at::vec::fmadd(v.a, v.a, acc);
        acc = at::vec::fmadd(v.b, v.b, acc);
      }
      const float sum_sq = at::vec::vec_reduce_all<float>(std::plus<fVec>(), acc);
      normalise_row(out + r * out_stride, xr, w, d, inv_rms(sum_sq, d, eps));
    }
  });
}

template <typename T>
void fused_add_rms_norm_rows(T* x, int64_t x_stride, T* res, int64_t res_stride, const T* w,
                             int64_t rows, int64_t d, double eps) {
  at::parallel_for(0, rows, grain(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* xr = x + r * x_stride;
      T* rr = res + r * res_stride;
      fVec acc(0.0f);
      for (int64_t i = 0; i < d; i += kStep) {
        const int64_t n = std::min(kStep, d - i);
        const F2 a = load(xr + i, n);
        const F2 b = load(rr + i, n);
        const F2 s = round_to<T>({a.a + b.a, a.b + b.b});
        store(rr + i, s, n);
        acc = at::vec::fmadd(s.a, s.a, acc);
        acc = at::vec::fmadd(s.b, s.b, acc);
      }
      const float sum_sq = at::vec::vec_reduce_all<float>(std::plus<fVec>(), acc);
      normalise_row(xr, rr, w, d, inv_rms(sum_sq, d, eps));
    }
  });
}

}  // namespace

void rms_norm_cpu(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, double eps) {
  using namespace inference_kernels;
  check_rms_norm_args(out, x, weight, eps, c10::DeviceType::CPU);
  const RowView xv = row_view(x, "x");
  const RowView ov = row_view(out, "out");
  if (xv.rows == 0 || xv.cols == 0) return;
  IK_DISPATCH_FLOAT_TYPES(x.scalar_type(), "rms_norm_cpu", [&] {
    rms_norm_rows(out.data_ptr<scalar_t>(), ov.row_stride, x.const_data_ptr<scalar_t>(),
                  xv.row_stride, weight.const_data_ptr<scalar_t>(), xv.rows, xv.cols, eps);
  });
}

void fused_add_rms_norm_cpu(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
                            double eps) {
  using namespace inference_kernels;
  check_fused_add_rms_norm_args(x, residual, weight, eps, c10::DeviceType::CPU);
  const RowView xv = row_view(x, "x");
  const RowView rv = row_view(residual, "residual");
  if (xv.rows == 0 || xv.cols == 0) return;
  IK_DISPATCH_FLOAT_TYPES(
      x.scalar_type(), "fused_add_rms_norm_cpu", [&] {
        fused_add_rms_norm_rows(x.data_ptr<scalar_t>(), xv.row_stride,
                                residual.data_ptr<scalar_t>(), rv.row_stride,
                                weight.const_data_ptr<scalar_t>(), xv.rows, xv.cols, eps);
      });
}
