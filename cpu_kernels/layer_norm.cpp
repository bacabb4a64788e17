// LayerNorm over the last dimension, on the CPU.
//
// y = (x - mean) * rstd * weight + bias, computed in fp32 and rounded once to x's
// dtype, as torch's F.layer_norm does (it also accumulates in fp32 for fp16/bf16).
// Statistics are two-pass: the mean first, then the mean of (x - mean)^2. Single-pass
// sum/sum-of-squares loses everything to cancellation when |mean| >> std (E[x^2] -
// mean^2 of two nearly equal fp32 numbers); Welford avoids that but costs a division
// per element. Two passes over a row that sits in L1/L2 after the first read cost no
// extra memory traffic, and the second pass sums small, centred numbers.
//
// Rows run in parallel (at::parallel_for); inside a row the arithmetic is fp32, in AVX2 or
// AVX-512 vectors where the CPU has them (row_simd.h, chosen by cpu_isa()) and in ATen's
// portable Vectorized types otherwise (aarch64, IK_CPU_ISA=baseline; vec_io.h).
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <optional>

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
// cpu_isa().
#define IK_SIMD_FILE "row_simd.h"
#include "simd_builds.h"
#endif

template <typename T>
struct LayerNormRows {
  const T* x;
  int64_t x_stride;
  T* out;  // may be x
  int64_t out_stride;
  const T* w;  // optional
  const T* b;  // optional
  int64_t rows, d;
  float eps;
};

// Sum of f(step) over the row, f taking a loaded step and its length.
template <typename T, typename F>
inline float row_sum(const T* xr, int64_t d, F f) {
  fVec acc(0.0f);
  for (int64_t i = 0; i < d; i += kStep) {
    const int64_t n = std::min(kStep, d - i);
    acc = acc + f(load(xr + i, n), n);
  }
  return at::vec::vec_reduce_all<float>(std::plus<fVec>(), acc);
}

#if defined(__x86_64__)
template <typename T, typename Sum, typename SqDev, typename Norm>
void simd_rows(const LayerNormRows<T>& a, Sum row_sum, SqDev row_sq_dev, Norm norm_row) {
  at::parallel_for(0, a.rows, grain(a.d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = a.x + r * a.x_stride;
      const float mean = row_sum(xr, a.d) / static_cast<float>(a.d);
      const float var = row_sq_dev(xr, a.d, mean) / static_cast<float>(a.d);
      norm_row(xr, a.w, a.b, a.out + r * a.out_stride, a.d, mean, 1.0f / std::sqrt(var + a.eps));
    }
  });
}
#endif

template <typename T>
void layer_norm_rows(const LayerNormRows<T>& a) {
  const int64_t d = a.d;
#if defined(__x86_64__)
  switch (cpu_isa()) {
    case Isa::kAvx512:
      return simd_rows(a, avx512::row_sum<T>, avx512::row_sq_dev<T>, avx512::layer_norm_row<T>);
    case Isa::kAvx2: return simd_rows(a, avx2::row_sum<T>, avx2::row_sq_dev<T>, avx2::layer_norm_row<T>);
    default: break;
  }
#endif
  at::parallel_for(0, a.rows, grain(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = a.x + r * a.x_stride;
      // Missing lanes of a partial step load as 0; they must not count as x - mean
      // in the variance, so the tail step masks them out.
      const float mean = row_sum(xr, d, [](const F2& v, int64_t) { return v.a + v.b; }) /
                         static_cast<float>(d);
      const fVec m(mean);
      const float var = row_sum(xr, d, [&](const F2& v, int64_t n) {
        fVec da = v.a - m, db = v.b - m;
        if (n < kStep) {  // zero the lanes past the row's end
          const fVec lane = fVec::arange(0.0f, 1.0f);
          const fVec nf(static_cast<float>(n));
          da = fVec::blendv(fVec(0.0f), da, lane < nf);
          db = fVec::blendv(fVec(0.0f), db, (lane + fVec(static_cast<float>(fVec::size()))) < nf);
        }
        return da * da + db * db;
      }) / static_cast<float>(d);
      const fVec rstd(1.0f / std::sqrt(var + a.eps));
      T* o = a.out + r * a.out_stride;
      for (int64_t i = 0; i < d; i += kStep) {
        const int64_t n = std::min(kStep, d - i);
        const F2 v = load(xr + i, n);
        F2 y{(v.a - m) * rstd, (v.b - m) * rstd};
        if (a.w) {
          const F2 g = load(a.w + i, n);
          y = {y.a * g.a, y.b * g.b};
        }
        if (a.b) {
          const F2 c = load(a.b + i, n);
          y = {y.a + c.a, y.b + c.b};
        }
        store(o + i, y, n);
      }
    }
  });
}

}  // namespace

void layer_norm_cpu(at::Tensor& out, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                    const std::optional<at::Tensor>& bias, double eps) {
  using namespace inference_kernels;
  check_layer_norm_args(out, x, weight, bias, eps, c10::DeviceType::CPU);
  const RowView xv = row_view(x, "x");
  const RowView ov = row_view(out, "out");
  if (xv.rows == 0 || xv.cols == 0) return;
  IK_DISPATCH_FLOAT_TYPES(x.scalar_type(), "layer_norm_cpu", [&] {
    layer_norm_rows<scalar_t>({x.const_data_ptr<scalar_t>(), xv.row_stride,
                               out.data_ptr<scalar_t>(), ov.row_stride,
                               weight ? weight->const_data_ptr<scalar_t>() : nullptr,
                               bias ? bias->const_data_ptr<scalar_t>() : nullptr, xv.rows, xv.cols,
                               static_cast<float>(eps)});
  });
}
