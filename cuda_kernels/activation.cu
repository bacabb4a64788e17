// silu, and SwiGLU (silu(gate) * up, optionally quantised to fp8) on NVIDIA GPUs
// (torch-free; see activation_torch.cpp for the tensor checks).
//
// Element-wise: a grid-stride loop over (row, vector) pairs. When every row of every
// operand is aligned to its vector and d is a multiple of the vector width, a thread
// moves 16 bytes of each input per step; any other layout takes the one-element path,
// so every size and stride the checks accept is handled. The checks refuse an out
// that overlaps an input, so inputs are const __restrict__ and may be read through
// the read-only data cache. Rounding matches the CPU backend, HF's LlamaMLP and vLLM
// (see cpu_kernels/activation.cpp): s = round(silu(float(gate))),
// y = round(float(s) * float(up)), silu(v) = v / (1 + expf(-v)) as torch's own CUDA
// silu computes it (IEEE division, accurate expf: no fast-math intrinsics).
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "gpu_launchers.h"
#include "vec_io.cuh"

namespace {

using namespace inference_kernels;
using namespace inference_kernels::cuda;
using Fp8 = __nv_fp8_storage_t;

constexpr int kThreads = 256;
// Enough blocks to fill an H200 (132 SMs x 8 blocks of 256) many times over; the
// grid-stride loop covers the rest, and no device query is needed.
constexpr int64_t kMaxBlocks = 65536;

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

// MUL: out <- round(round(silu(gate)) * up); otherwise out <- round(silu(gate)).
// Out is T, or Fp8 (MUL only) for the quantised product.
template <typename T, typename Out, int VEC, bool MUL>
__global__ void silu_mul_kernel(Out* __restrict__ out, int64_t out_stride,
                                const T* __restrict__ gate, int64_t gate_stride,
                                const T* __restrict__ up, int64_t up_stride,
                                const float* __restrict__ scale, int64_t rows, int64_t nvec) {
  using In = Pack<T, VEC>;
  using O = Pack<Out, VEC>;
  constexpr bool kFp8 = std::is_same_v<Out, Fp8>;
  // vLLM's convention: multiply by the reciprocal of the scale, computed once per
  // thread from device memory (no host sync; a CUDA graph replays a new scale).
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
void launch(const SiluOperands& a, const float* scale, cudaStream_t stream) {
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
int launch_any(DType out_dtype, const SiluOperands& a, const float* scale, cudaStream_t stream) {
  const bool mul = a.up.ptr != nullptr;
  if (out_dtype == DType::kFloat8E4M3) {
    if (!mul || !scale) return cudaErrorInvalidValue;  // fp8 only for the product, with a scale
    launch<T, Fp8, true>(a, scale, stream);
  } else if (mul) {
    launch<T, T, true>(a, nullptr, stream);
  } else {
    launch<T, T, false>(a, nullptr, stream);
  }
  return cudaSuccess;
}

}  // namespace

namespace inference_kernels {

int silu_mul_launch(DType dtype, DType out_dtype, const SiluOperands& a, const float* scale,
                    void* stream) {
  if (a.rows <= 0 || a.d <= 0) return cudaSuccess;
  if (out_dtype != dtype && out_dtype != DType::kFloat8E4M3) return cudaErrorInvalidValue;
  const auto s = static_cast<cudaStream_t>(stream);
  int err = cudaErrorInvalidValue;
  switch (dtype) {
    case DType::kFloat32: err = launch_any<float>(out_dtype, a, scale, s); break;
    case DType::kFloat16: err = launch_any<__half>(out_dtype, a, scale, s); break;
    case DType::kBFloat16: err = launch_any<__nv_bfloat16>(out_dtype, a, scale, s); break;
    case DType::kFloat8E4M3: break;  // not an input dtype
  }
  return err != cudaSuccess ? err : cudaGetLastError();
}

}  // namespace inference_kernels
