// Row I/O shared by the CPU kernels: fp32/fp16/bf16 elements in and out of fp32
// ATen vectors, two float vectors (kStep elements) per step, with a partial step
// for the row's tail. The arithmetic is always fp32; these helpers only convert.
#pragma once

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/Float8_e4m3fn.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "fp8.h"

namespace inference_kernels::cpu {

using fVec = at::vec::Vectorized<float>;
constexpr int64_t kStep = 2 * fVec::size();  // elements per step, as two float vectors

struct F2 {
  fVec a, b;
};

// Loads `n` (<= kStep) elements of `p` as floats; missing lanes read as 0.
template <typename T>
inline F2 load(const T* p, int64_t n) {
  if (n == kStep) {  // full step: no partial-copy path
    if constexpr (std::is_same_v<T, float>) {
      return {fVec::loadu(p), fVec::loadu(p + fVec::size())};
    } else {
      auto [a, b] = at::vec::convert_to_float<T>(at::vec::Vectorized<T>::loadu(p));
      return {a, b};
    }
  }
  if constexpr (std::is_same_v<T, float>) {
    const int64_t na = std::min<int64_t>(n, fVec::size());
    return {fVec::loadu(p, na), fVec::loadu(p + na, n - na)};
  } else {
    auto [a, b] = at::vec::convert_to_float<T>(at::vec::Vectorized<T>::loadu(p, n));
    return {a, b};
  }
}

template <typename T>
inline void store(T* p, const F2& v, int64_t n) {
  if (n == kStep) {
    if constexpr (std::is_same_v<T, float>) {
      v.a.store(p);
      v.b.store(p + fVec::size());
    } else {
      at::vec::convert_from_float<T>(v.a, v.b).store(p);
    }
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    const int64_t na = std::min<int64_t>(n, fVec::size());
    v.a.store(p, na);
    if (n > na) v.b.store(p + na, n - na);
  } else {
    at::vec::convert_from_float<T>(v.a, v.b).store(p, n);
  }
}

// Rounds to T and back, as a T-typed intermediate would.
template <typename T>
inline F2 round_to(const F2& v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    auto [a, b] = at::vec::convert_to_float<T>(at::vec::convert_from_float<T>(v.a, v.b));
    return {a, b};
  }
}

// p[0:n] <- fp8(clamp(v * inv_scale)), round to nearest even (c10's conversion).
inline void store_fp8(c10::Float8_e4m3fn* p, const F2& v, int64_t n, float inv_scale) {
  float buf[kStep];
  v.a.store(buf);
  v.b.store(buf + fVec::size());
  for (int64_t k = 0; k < n; ++k) p[k] = c10::Float8_e4m3fn(clamp_fp8(buf[k] * inv_scale));
}

// Rows per at::parallel_for task: enough work per task to amortise scheduling
// (~32K elements).
inline int64_t grain(int64_t d) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(d, 1)); }

}  // namespace inference_kernels::cpu
