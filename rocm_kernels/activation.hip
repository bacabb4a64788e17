// silu, and SwiGLU (silu(gate) * up, optionally quantised to float8_e4m3fnuz) on AMD
// CDNA GPUs (gfx942, gfx90a; torch-free, the launcher ABI of gpu_launchers.h).
//
// Element-wise: a grid-stride loop over (row, vector) pairs, 256 threads (4 waves of
// 64) a block. When every row of every operand is aligned to its vector and d is a
// multiple of the vector width, a thread moves 16 bytes of each input per step
// (global_load_dwordx4); any other layout takes the one-element path, so every size
// and stride the checks accept is handled. The checks refuse an out that overlaps an
// input, so inputs are const __restrict__. Rounding matches the CPU and CUDA backends,
// HF's LlamaMLP and vLLM (see cpu_kernels/activation.cpp): s = round(silu(float(gate))),
// y = round(float(s) * float(up)), silu(v) = v / (1 + expf(-v)) with HIP's accurate
// expf and IEEE division (no fast-math).
#include <hip/hip_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "gpu_launchers.h"
#include "vec_io_hip.h"

namespace {

using namespace inference_kernels;
using namespace inference_kernels::rocm;
using Fp8 = uint8_t;  // float8_e4m3fnuz bits

constexpr int kThreads = 256;
// Enough blocks to fill an MI300X (304 CUs) many times over; the grid-stride loop
// covers the rest, and no device query is needed.
constexpr int64_t kMaxBlocks = 65536;

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

// MUL: out <- round(round(silu(gate)) * up); otherwise out <- round(silu(gate)).
// Out is T, or Fp8 (MUL only) for the quantised product.
template <typename T, typename Out, int VEC, bool MUL>
__global__ void __launch_bounds__(kThreads)
silu_mul_kernel(Out* __restrict__ out, int64_t out_stride, const T* __restrict__ gate,
                int64_t gate_stride, const T* __restrict__ up, int64_t up_stride,
                const float* __restrict__ scale, int64_t rows, int64_t nvec) {
  using In = Pack<T, VEC>;
  using O = Pack<Out, VEC>;
  constexpr bool kFp8 = std::is_same_v<Out, Fp8>;
  // vLLM's convention: multiply by the reciprocal of the scale, read from device
  // memory by the kernel (no host sync; a captured graph replays a new scale).
  float inv_scale = 1.0f;
  if constexpr (kFp8) inv_scale = 1.0f / *scale;

  const int64_t total = rows * nvec;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t r = i / nvec, c = i - r * nvec;
    const In g = reinterpret_cast<const In*>(gate + r * gate_stride)[c];
    In u;
    if constexpr (MUL) u = reinterpret_cast<const In*>(up + r * up_stride)[c];
    O y;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float v = silu(to_float(g.v[k]));
      if constexpr (MUL) v = to_float(from_float<T>(v)) * to_float(u.v[k]);
      if constexpr (kFp8) {
        y.v[k] = to_fp8(to_float(from_float<T>(v)) * inv_scale);  // quantise the T-rounded y
      } else {
        y.v[k] = from_float<T>(v);
      }
    }
    reinterpret_cast<O*>(out + r * out_stride)[c] = y;
  }
}

template <typename T, typename Out, bool MUL>
void launch(const SiluOperands& a, const float* scale, hipStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = a.d % kVec == 0 && a.gate.stride % kVec == 0 && aligned(a.gate.ptr, 16) &&
                   (!MUL || (a.up.stride % kVec == 0 && aligned(a.up.ptr, 16))) &&
                   a.out.stride % kVec == 0 && aligned(a.out.ptr, sizeof(Pack<Out, kVec>));
  const int64_t nvec = vec ? a.d / kVec : a.d;
  const int64_t blocks = std::min<int64_t>((a.rows * nvec + kThreads - 1) / kThreads, kMaxBlocks);
  auto run = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        static_cast<Out*>(a.out.ptr), a.out.stride, static_cast<const T*>(a.gate.ptr),
        a.gate.stride, static_cast<const T*>(a.up.ptr), a.up.stride, scale, a.rows, nvec);
  };
  if (vec) {
    run(silu_mul_kernel<T, Out, kVec, MUL>);
  } else {
    run(silu_mul_kernel<T, Out, 1, MUL>);
  }
}

template <typename T>
int launch_any(DType out_dtype, const SiluOperands& a, const float* scale, hipStream_t stream) {
  const bool mul = a.up.ptr != nullptr;
  if (out_dtype == DType::kFloat8E4M3) {  // this backend's fp8: e4m3fnuz
    if (!mul || !scale) return hipErrorInvalidValue;  // fp8 only for the product, with a scale
    launch<T, Fp8, true>(a, scale, stream);
  } else if (mul) {
    launch<T, T, true>(a, nullptr, stream);
  } else {
    launch<T, T, false>(a, nullptr, stream);
  }
  return hipSuccess;
}

}  // namespace

namespace inference_kernels {

int silu_mul_launch(DType dtype, DType out_dtype, const SiluOperands& a, const float* scale,
                    void* stream) {
  if (a.rows <= 0 || a.d <= 0) return hipSuccess;
  if (out_dtype != dtype && out_dtype != DType::kFloat8E4M3) return hipErrorInvalidValue;
  const auto s = static_cast<hipStream_t>(stream);
  int err = hipErrorInvalidValue;
  switch (dtype) {
    case DType::kFloat32: err = launch_any<float>(out_dtype, a, scale, s); break;
    case DType::kFloat16: err = launch_any<Half>(out_dtype, a, scale, s); break;
    case DType::kBFloat16: err = launch_any<BFloat16>(out_dtype, a, scale, s); break;
    case DType::kFloat8E4M3: break;  // not an input dtype
  }
  return err != hipSuccess ? err : hipGetLastError();
}

}  // namespace inference_kernels
