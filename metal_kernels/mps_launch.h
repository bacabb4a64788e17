// A Metal dispatch described in plain C++: which kernel of the embedded metallib, what
// sits at each [[buffer(i)]] (a tensor's storage from its offset, or the bytes of a
// `constant T&` scalar), and the grid. The torch-facing wrappers (*_torch.cpp) check
// the tensors and build a Launch; mps_dispatch.mm, the only Objective-C++ file,
// encodes it on PyTorch's current MPS stream. Keeping the wrappers free of Objective-C
// lets them compile, and be checked, on machines without Apple's SDK.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "torch_checks.h"

// The device the wrappers accept: MPS. The emulation build of the tests
// (tests/msl/mps_emulation.cpp) sets it to the CPU, runs these same wrappers on CPU
// tensors and executes each Launch under the MSL harness.
#ifndef IK_METAL_DEVICE
#define IK_METAL_DEVICE c10::DeviceType::MPS
#endif

namespace inference_kernels::metal {

constexpr c10::DeviceType kDevice = IK_METAL_DEVICE;

struct Arg {
  at::Tensor tensor;      // defined: bound as a buffer
  int64_t offset = 0;     // elements past the tensor's own storage offset
  std::vector<unsigned char> bytes;  // otherwise: the value, for a `constant T&`

  static Arg buffer(const at::Tensor& t, int64_t offset = 0) { return {t, offset, {}}; }
  template <typename T>
  static Arg value(const T& v) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 4096);
    Arg a;
    a.bytes.resize(sizeof(T));
    std::memcpy(a.bytes.data(), &v, sizeof(T));
    return a;
  }
  // Where the buffer starts, in bytes from the start of the tensor's MTLBuffer.
  int64_t byte_offset() const { return (tensor.storage_offset() + offset) * tensor.element_size(); }
};

struct Launch {
  std::string kernel;     // a [[host_name]] of metal_kernels/*.metal
  std::vector<Arg> args;  // args[i] is [[buffer(i)]]
  std::array<uint64_t, 3> grid{1, 1, 1};  // threadgroups, or threads when `threads`
  std::array<uint64_t, 3> threadgroup{1, 1, 1};
  bool threads = false;   // dispatchThreads (edge threadgroups smaller), else dispatchThreadgroups
};

// Encodes `launch` on at::mps::getCurrentMPSStream() (mps_dispatch.mm).
void dispatch(const Launch& launch);

// The kernels' dtype suffix: rms_norm_f32, silu_mul_bf16, ...
inline std::string suffix(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "_f32";
    case at::kHalf: return "_f16";
    case at::kBFloat16: return "_bf16";
    default: TORCH_CHECK(false, "float32, float16 or bfloat16 expected, got ", c10::toString(t));
  }
}

// Sizes and strides reach the shaders as 32-bit `uint`s.
inline uint32_t u32(int64_t v, const char* what) {
  TORCH_CHECK(v >= 0 && v <= int64_t{UINT32_MAX}, what,
              " must fit in 32 bits for the Metal kernels, got ", num(v));
  return static_cast<uint32_t>(v);
}

// Kernels that index dense rows (rms_norm.metal, the matmuls, q4k.metal) take
// contiguous tensors only; the others take row strides.
inline void check_contiguous(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous for the Metal kernel, got sizes ",
              dims_str(t.sizes()), " and strides ", dims_str(t.strides()),
              " (call .contiguous() first)");
}

// Threads per threadgroup for a kernel that strides one threadgroup over a row of d:
// whole SIMD-groups, at most 256 (every Apple GPU allows that many for these kernels).
inline uint64_t row_threads(int64_t d) {
  return static_cast<uint64_t>(std::min<int64_t>(256, (std::max<int64_t>(d, 1) + 31) / 32 * 32));
}

}  // namespace inference_kernels::metal
