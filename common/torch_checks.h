// Argument checks shared by every backend's torch-facing entry points.
// Kernels see a tensor as `rows` rows of `cols` contiguous elements, `row_stride`
// elements apart; these helpers prove that view is valid or say why not.
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp8.h"
#include "gpu_launchers.h"

// The activation dtypes every op accepts: fp32, fp16, bf16 (scalar_t inside).
#define IK_DISPATCH_FLOAT_TYPES(TYPE, NAME, ...)                   \
  AT_DISPATCH_SWITCH(TYPE, NAME,                                   \
                     AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__)     \
                     AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__)      \
                     AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))

namespace inference_kernels {

// The dtype the *_fp8 ops write: ROCm's kernels encode float8_e4m3fnuz (the format
// torch uses on gfx942 and gfx90a, common/fp8.h); the CPU and CUDA ones float8_e4m3fn.
#if defined(ROCM_KERNEL)
constexpr at::ScalarType kFp8Type = at::kFloat8_e4m3fnuz;
constexpr const char* kFp8Name = "float8_e4m3fnuz";
#else
constexpr at::ScalarType kFp8Type = at::kFloat8_e4m3fn;
constexpr const char* kFp8Name = "float8_e4m3fn";
#endif

// Messages hand TORCH_CHECK strings only, never numbers or ArrayRefs: on the H200
// (torch 2.11, Ubuntu's gcc 13) a failing check that streamed an integer crashed
// once inside std::ostream's number formatting (see BENCHMARKS.md, run notes);
// std::to_string does not go through the stream's locale.
inline std::string num(int64_t v) { return std::to_string(v); }

// "[a, b, c]"
inline std::string dims_str(c10::IntArrayRef dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

struct RowView {
  int64_t rows;
  int64_t cols;
  int64_t row_stride;  // in elements
};

// The last dimension must be contiguous and the leading dimensions must
// collapse into one stride (a slice of rows, or columns [a:b] of a wider
// tensor, is fine; a transposed tensor is not).
inline RowView row_view(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() >= 1, name, " must have at least one dimension, got a scalar");
  const int64_t cols = t.size(-1);
  TORCH_CHECK(cols == 1 || t.stride(-1) == 1, name,
              " must be contiguous in its last dimension, got stride ", num(t.stride(-1)),
              " (call .contiguous() first)");
  const int64_t rows = cols == 0 ? 0 : t.numel() / cols;
  int64_t row_stride = cols;
  // Walk the leading dims from the innermost outwards; size-1 dims carry no
  // layout information.
  bool have_stride = false;
  int64_t expect = 0;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (!have_stride) {
      row_stride = t.stride(d);
      expect = row_stride * t.size(d);
      have_stride = true;
    } else {
      TORCH_CHECK(t.stride(d) == expect, name, " has leading dimensions that cannot be ",
                  "viewed as one row dimension (sizes ", dims_str(t.sizes()), ", strides ", dims_str(t.strides()),
                  "); call .contiguous() first");
      expect *= t.size(d);
    }
  }
  TORCH_CHECK(rows <= 1 || row_stride >= cols, name, " rows overlap (row stride ", num(row_stride),
              " < row length ", num(cols), ")");
  return {rows, cols, row_stride};
}

// Overlap checks that name the operands (torch's own messages name neither).
// partial_only: a may be b itself (kernels that read each element before writing it),
// but not share only some of its elements.
inline void check_no_overlap(const at::Tensor& a, const char* a_name, const at::Tensor& b,
                             const char* b_name, bool partial_only = false) {
  const at::MemOverlapStatus s = at::get_overlap_status(a, b);
  if (s != at::MemOverlapStatus::Partial && (partial_only || s != at::MemOverlapStatus::Full)) return;
  TORCH_CHECK(false, a_name, partial_only ? " must be " : " must not overlap ", b_name,
              partial_only ? " itself or not overlap it" : "", ", got views that share ",
              s == at::MemOverlapStatus::Full ? "the same elements" : "some elements");
}

inline void check_float_dtype(const at::Tensor& t, const char* name) {
  const auto st = t.scalar_type();
  TORCH_CHECK(st == at::kFloat || st == at::kHalf || st == at::kBFloat16, name,
              " must be float32, float16 or bfloat16, got ", c10::toString(st));
}

inline void check_same_device(const at::Tensor& t, const at::Tensor& ref, const char* name,
                              const char* ref_name) {
  TORCH_CHECK(t.device() == ref.device(), name, " must be on the same device as ", ref_name,
              " (", ref.device().str(), "), got ", t.device().str());
}

inline void check_same(const at::Tensor& t, const at::Tensor& ref, const char* name,
                       const char* ref_name) {
  check_same_device(t, ref, name, ref_name);
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), name, " must have the dtype of ", ref_name,
              " (", c10::toString(ref.scalar_type()), "), got ", c10::toString(t.scalar_type()));
}

inline void check_device(const at::Tensor& t, c10::DeviceType type, const char* name) {
  TORCH_CHECK(t.device().type() == type, name, " must be a ", c10::DeviceTypeName(type),
              " tensor, got one on ", t.device().str());
}

// A norm weight (or bias): one contiguous vector whose length is the row length.
inline void check_norm_weight(const at::Tensor& weight, const at::Tensor& x,
                              const char* name = "weight") {
  check_same(weight, x, name, "x");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(-1),
              name, " must have shape [", num(x.size(-1)), "] (the last dimension of x), got ",
              dims_str(weight.sizes()));
  TORCH_CHECK(weight.stride(0) == 1 || weight.size(0) <= 1, name, " must be contiguous, got stride ",
              num(weight.stride(0)));
}

// The dtype tag the torch-free GPU launchers take (gpu_launchers.h).
inline DType gpu_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::kFloat32;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    default: TORCH_CHECK(false, "float32, float16 or bfloat16 expected, got ", c10::toString(t.scalar_type()));
  }
}

inline void check_same_shape(const at::Tensor& t, const at::Tensor& ref, const char* name,
                             const char* ref_name) {
  TORCH_CHECK(t.sizes() == ref.sizes(), name, " must have the shape of ", ref_name, " ",
              dims_str(ref.sizes()), ", got ", dims_str(t.sizes()));
}

// rms_norm(out, x, weight, eps) and fused_add_rms_norm(x, residual, weight, eps):
// the checks every backend makes before it touches memory.
inline void check_eps(double eps) {
  TORCH_CHECK(eps >= 0.0, "eps must be non-negative, got ", std::to_string(eps));
}

// x on `type`, float, at least 1-d; `t` (out or residual) of x's device, dtype and shape.
inline void check_norm_input(const at::Tensor& x, const at::Tensor& t, const char* name,
                             c10::DeviceType type) {
  check_device(x, type, "x");
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension, got a scalar");
  check_float_dtype(x, "x");
  check_same(t, x, name, "x");
  check_same_shape(t, x, name, "x");
}

inline void check_rms_norm_args(const at::Tensor& out, const at::Tensor& x,
                                const at::Tensor& weight, double eps, c10::DeviceType type) {
  check_norm_input(x, out, "out", type);
  check_norm_weight(weight, x);
  check_eps(eps);
  // out may be x itself (each element is read before it is written by the same
  // thread), but never a partial overlap.
  check_no_overlap(out, "out", x, "x", true);
  check_no_overlap(out, "out", weight, "weight");
}

inline void check_fused_add_rms_norm_args(const at::Tensor& x, const at::Tensor& residual,
                                          const at::Tensor& weight, double eps,
                                          c10::DeviceType type) {
  check_norm_input(x, residual, "residual", type);
  check_norm_weight(weight, x);
  check_eps(eps);
  check_no_overlap(x, "x", residual, "residual");
  check_no_overlap(x, "x", weight, "weight");
  check_no_overlap(residual, "residual", weight, "weight");
}

// layer_norm(out, x, weight?, bias?, eps): the checks every backend makes. As
// rms_norm, out may be x itself but not partially overlap it, and never overlaps
// weight or bias.
inline void check_layer_norm_args(const at::Tensor& out, const at::Tensor& x,
                                  const std::optional<at::Tensor>& weight,
                                  const std::optional<at::Tensor>& bias, double eps,
                                  c10::DeviceType type) {
  check_norm_input(x, out, "out", type);
  check_eps(eps);
  check_no_overlap(out, "out", x, "x", true);
  if (weight) {
    check_norm_weight(*weight, x, "weight");
    check_no_overlap(out, "out", *weight, "weight");
  }
  if (bias) {
    check_norm_weight(*bias, x, "bias");
    check_no_overlap(out, "out", *bias, "bias");
  }
}

// rms_norm_fp8 / rms_norm_fp8_dynamic: x normalised (after an optional residual add)
// into a kFp8Type `out` (e4m3fn; e4m3fnuz on ROCm) of x's shape.
inline void check_rms_norm_fp8_args(const at::Tensor& out, const at::Tensor& x,
                                    const at::Tensor& weight, double eps,
                                    const std::optional<at::Tensor>& residual,
                                    c10::DeviceType type) {
  check_device(x, type, "x");
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension, got a scalar");
  check_float_dtype(x, "x");
  check_norm_weight(weight, x);
  check_eps(eps);
  TORCH_CHECK(out.device() == x.device(), "out must be on the same device as x (",
              x.device().str(), "), got ", out.device().str());
  TORCH_CHECK(out.scalar_type() == kFp8Type, "out must be ", kFp8Name, ", got ",
              c10::toString(out.scalar_type()));
  check_same_shape(out, x, "out", "x");
  check_no_overlap(out, "out", x, "x");
  check_no_overlap(out, "out", weight, "weight");
  if (residual) {
    check_same(*residual, x, "residual", "x");
    check_same_shape(*residual, x, "residual", "x");
    check_no_overlap(*residual, "residual", x, "x");
    check_no_overlap(*residual, "residual", out, "out");
    check_no_overlap(*residual, "residual", weight, "weight");
  }
}

// A static per-tensor scale: one float32 element on x's device (read there, so
// no host synchronisation and the call can be captured in a CUDA graph).
inline void check_fp8_scale(const at::Tensor& scale, const at::Tensor& x) {
  TORCH_CHECK(scale.device() == x.device(), "scale must be on the same device as x (",
              x.device().str(), "), got ", scale.device().str());
  TORCH_CHECK(scale.scalar_type() == at::kFloat, "scale must be float32, got ",
              c10::toString(scale.scalar_type()));
  TORCH_CHECK(scale.numel() == 1, "scale must have one element, got ", num(scale.numel()));
}

// Per-row scales of a dynamic quantisation: float32, shape x.shape[:-1] + [1], contiguous.
inline void check_row_scales(const at::Tensor& scales, const at::Tensor& x) {
  TORCH_CHECK(scales.device() == x.device(), "scales must be on the same device as x (",
              x.device().str(), "), got ", scales.device().str());
  TORCH_CHECK(scales.scalar_type() == at::kFloat, "scales must be float32, got ",
              c10::toString(scales.scalar_type()));
  std::vector<int64_t> want(x.sizes().begin(), x.sizes().end());
  want.back() = 1;
  TORCH_CHECK(scales.sizes() == c10::IntArrayRef(want), "scales must have shape ", dims_str(want),
              ", got ", dims_str(scales.sizes()));
  TORCH_CHECK(scales.is_contiguous(), "scales must be contiguous");
  check_no_overlap(scales, "scales", x, "x");
}

// silu, silu_mul, silu_and_mul and silu_and_mul_fp8: the checks every backend
// makes, and the operands its kernels take (gpu_launchers.h). out never overlaps
// an input, so kernels may read inputs through restrict-qualified pointers.
// (check_no_overlap proves this for dense tensors; strided views that share
// storage are the caller's to keep apart, as for every torch out= op.)
inline void check_activation_input(const at::Tensor& t, c10::DeviceType type, const char* name) {
  check_device(t, type, name);
  TORCH_CHECK(t.dim() >= 1, name, " must have at least one dimension, got a scalar");
  check_float_dtype(t, name);
}

inline Rows out_rows(at::Tensor& t, const RowView& v) { return {t.data_ptr(), v.row_stride}; }

// Rows starting `col` elements into each row of `t`. Kernels only read through
// them; the const_cast fits the one Rows struct every launcher takes.
inline Rows in_rows(const at::Tensor& t, const RowView& v, int64_t col = 0) {
  const auto* base = static_cast<const char*>(t.const_data_ptr());
  return {const_cast<char*>(base) + col * t.element_size(), v.row_stride};
}

// x: [..., 2d], gate = x[..., :d], up = x[..., d:]; out: [..., d] of x's dtype, or
// kFp8Type (e4m3fn; e4m3fnuz on ROCm) when `scale` is given (silu_and_mul_fp8).
inline SiluOperands silu_and_mul_operands(at::Tensor& out, const at::Tensor& x,
                                          const at::Tensor* scale, c10::DeviceType type) {
  check_activation_input(x, type, "x");
  TORCH_CHECK(x.size(-1) % 2 == 0, "x must have an even last dimension (gate, then up), got ",
              num(x.size(-1)));
  if (scale) {
    check_same_device(out, x, "out", "x");
    TORCH_CHECK(out.scalar_type() == kFp8Type, "out must have dtype ", c10::toString(kFp8Type),
                ", got ", c10::toString(out.scalar_type()));
    check_fp8_scale(*scale, x);
    check_no_overlap(out, "out", *scale, "scale");
  } else {
    check_same(out, x, "out", "x");
  }
  const int64_t d = x.size(-1) / 2;
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = d;
  TORCH_CHECK(out.sizes() == c10::IntArrayRef(shape), "out must have shape ", dims_str(shape),
              " (x's, last dimension halved), got ", dims_str(out.sizes()));
  check_no_overlap(out, "out", x, "x");
  const RowView xv = row_view(x, "x");
  const RowView ov = row_view(out, "out");
  return {out_rows(out, ov), in_rows(x, xv), in_rows(x, xv, d), ov.rows, d};
}

// gate, up and out: one shape and dtype.
inline SiluOperands silu_mul_operands(at::Tensor& out, const at::Tensor& gate,
                                      const at::Tensor& up, c10::DeviceType type) {
  check_activation_input(gate, type, "gate");
  check_same(up, gate, "up", "gate");
  check_same_shape(up, gate, "up", "gate");
  check_same(out, gate, "out", "gate");
  check_same_shape(out, gate, "out", "gate");
  check_no_overlap(out, "out", gate, "gate");
  check_no_overlap(out, "out", up, "up");
  const RowView gv = row_view(gate, "gate");
  const RowView ov = row_view(out, "out");
  return {out_rows(out, ov), in_rows(gate, gv), in_rows(up, row_view(up, "up")), ov.rows, ov.cols};
}

// GGUF k-quants: a quantised weight is uint8 [N, blocks * bytes] (ggml_blocks.h),
// contiguous, with its blocks aligned to `align` bytes (on the CPU the address; on a
// GPU the offset into the buffer, whose start is page-aligned). Returns blocks per row.
inline int64_t check_kquant_weight(const at::Tensor& q, int64_t bytes, int64_t align,
                                   const char* fmt, c10::DeviceType type, const char* name) {
  check_device(q, type, name);
  TORCH_CHECK(q.scalar_type() == at::kByte, name, " must be uint8 (", fmt, " blocks), got ",
              c10::toString(q.scalar_type()));
  TORCH_CHECK(q.dim() == 2 && q.size(1) % bytes == 0, name, " must have shape [N, K / 256 * ",
              num(bytes), "] (", fmt, " blocks of ", num(bytes), " bytes), got ",
              dims_str(q.sizes()));
  TORCH_CHECK(q.is_contiguous(), name, " must be contiguous");
  const int64_t start = type == c10::DeviceType::CPU
                            ? static_cast<int64_t>(reinterpret_cast<uintptr_t>(q.const_data_ptr()))
                            : q.storage_offset();
  TORCH_CHECK(start % align == 0, name, " must start at an address aligned to ", num(align),
              " bytes");
  return q.size(1) / bytes;
}

// Rows of x the k-quant gemv kernels take (decode); more rows dequantise and matmul.
constexpr int64_t kMaxKquantGemvRows = 8;

// q4k_gemv / q6k_gemv(out, x, q): x [M in 1..8, K] float, q the weight's blocks (K / 256
// per row), out [M, N] of x's dtype, contiguous. Returns blocks per row.
inline int64_t check_kquant_gemv_args(const at::Tensor& out, const at::Tensor& x,
                                      const at::Tensor& q, int64_t bytes, int64_t align,
                                      const char* fmt, c10::DeviceType type) {
  const int64_t blocks = check_kquant_weight(q, bytes, align, fmt, type, "q");
  check_device(x, type, "x");
  check_float_dtype(x, "x");
  TORCH_CHECK(x.dim() == 2, "x must be 2-D [M, K], got shape ", dims_str(x.sizes()));
  const int64_t m = x.size(0), k = x.size(1), n = q.size(0);
  TORCH_CHECK(m >= 1 && m <= kMaxKquantGemvRows, "x must have 1 to 8 rows (M), got ", num(m),
              "; for more rows dequantise and use a matmul");
  TORCH_CHECK(k == blocks * 256, "x must have K = ", num(blocks * 256), " columns (q holds ",
              num(blocks), " ", fmt, " blocks of 256 per row), got ", num(k));
  check_same(out, x, "out", "x");
  const std::vector<int64_t> want = {m, n};
  TORCH_CHECK(out.sizes() == c10::IntArrayRef(want), "out must have shape ", dims_str(want),
              ", got ", dims_str(out.sizes()));
  TORCH_CHECK(out.is_contiguous(), "out must be contiguous");
  check_no_overlap(out, "out", x, "x");
  check_no_overlap(out, "out", q, "q");
  return blocks;
}

// matmul(out, a, b): a [M, K] and b [K, N] float of one dtype and device; out [M, N]
// of that dtype, contiguous, overlapping neither.
inline void check_matmul_args(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                              c10::DeviceType type) {
  check_device(a, type, "a");
  check_float_dtype(a, "a");
  TORCH_CHECK(a.dim() == 2, "a must be 2-D [M, K], got shape ", dims_str(a.sizes()));
  check_same(b, a, "b", "a");
  TORCH_CHECK(b.dim() == 2 && b.size(0) == a.size(1), "b must be 2-D [K, N] with K = ",
              num(a.size(1)), " (a's columns), got shape ", dims_str(b.sizes()));
  check_same(out, a, "out", "a");
  const std::vector<int64_t> want = {a.size(0), b.size(1)};
  TORCH_CHECK(out.sizes() == c10::IntArrayRef(want), "out must have shape ", dims_str(want),
              " ([M, N]), got ", dims_str(out.sizes()));
  TORCH_CHECK(out.is_contiguous(), "out must be contiguous, got strides ", dims_str(out.strides()));
  check_no_overlap(out, "out", a, "a");
  check_no_overlap(out, "out", b, "b");
}

inline SiluOperands silu_operands(at::Tensor& out, const at::Tensor& x, c10::DeviceType type) {
  check_activation_input(x, type, "x");
  check_same(out, x, "out", "x");
  check_same_shape(out, x, "out", "x");
  check_no_overlap(out, "out", x, "x");
  const RowView ov = row_view(out, "out");
  return {out_rows(out, ov), in_rows(x, row_view(x, "x")), {nullptr, 0}, ov.rows, ov.cols};
}

}  // namespace inference_kernels
