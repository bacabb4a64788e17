// LayerNorm over the last dimension on AMD CDNA GPUs (gfx942, gfx90a; torch-free, the
// launcher ABI of gpu_launchers.h; cuda_kernels/layer_norm_torch.cpp checks the tensors).
//
// The design of cuda_kernels/layer_norm.cu, for wave64: one block per row, fp32
// two-pass statistics (mean, then the mean of (x - mean)^2; see layer_norm.cu for why
// not single-pass or Welford), the row held in registers (kItems 16-byte vectors a
// thread) up to kItems * 1024 vectors and streamed through L2 beyond; y = (x - mean) *
// rstd * weight + bias rounded once, as torch's F.layer_norm. Aligned rows move in
// 16-byte vectors (global_load_dwordx4), any other row takes the scalar path. Blocks
// are whole waves (64 lanes); the reductions are block_reduce_hip.h's.
#include <hip/hip_runtime.h>

#include <algorithm>
#include <cstdint>

#include "block_reduce_hip.h"
#include "gpu_launchers.h"
#include "vec_io_hip.h"

namespace {

using inference_kernels::DType;
using inference_kernels::LayerNormParams;
using namespace inference_kernels::rocm;

// 16-byte vectors a thread keeps in registers on the cached path: 16 VGPRs.
constexpr int kItems = 4;

// One output vector from one input vector: (a - mean) * rstd * w + b, rounded once.
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> normalise(const Pack<T, VEC>& a, const LayerNormParams& p,
                                                  int64_t i, float mean, float rstd) {
  using P = Pack<T, VEC>;
  float y[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) y[k] = (to_float(a.v[k]) - mean) * rstd;
  if (p.weight) {  // uniform across the block: no divergence
    const P g = reinterpret_cast<const P*>(p.weight)[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) y[k] *= to_float(g.v[k]);
  }
  if (p.bias) {
    const P c = reinterpret_cast<const P*>(p.bias)[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) y[k] += to_float(c.v[k]);
  }
  P out;
#pragma unroll
  for (int k = 0; k < VEC; ++k) out.v[k] = from_float<T>(y[k]);
  return out;
}

template <typename T, int VEC>
__device__ __forceinline__ float vec_sum(const Pack<T, VEC>& a) {
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < VEC; ++k) s += to_float(a.v[k]);
  return s;
}

template <typename T, int VEC>
__device__ __forceinline__ float vec_sq_dev(const Pack<T, VEC>& a, float mean) {
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const float c = to_float(a.v[k]) - mean;
    s += c * c;
  }
  return s;
}

// ITEMS > 0: the row is cached in registers (ITEMS vectors a thread, blockDim.x *
// ITEMS >= d / VEC); ITEMS == 0: any length, each pass re-reads the row.
// x and out may be the same row (layer_norm with out=x): every element is read by
// the thread that writes it, before the barriers of both reductions, so neither
// pointer is __restrict__.
template <typename T, int VEC, int ITEMS>
__global__ void __launch_bounds__(kMaxThreads) layer_norm_kernel(LayerNormParams p) {
  using P = Pack<T, VEC>;
  const int64_t row = blockIdx.x;
  const P* xr = reinterpret_cast<const P*>(static_cast<const T*>(p.x.ptr) + row * p.x.stride);
  P* orow = reinterpret_cast<P*>(static_cast<T*>(p.out.ptr) + row * p.out.stride);
  const int nvec = static_cast<int>(p.d / VEC);
  // Divided, not multiplied by 1/d: sum / d is correctly rounded, so a constant row's
  // mean is exactly its value and x - mean exactly 0 (the output exactly the bias).
  const float d = static_cast<float>(p.d);

  if constexpr (ITEMS > 0) {
    P cache[ITEMS];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < nvec) {
        cache[k] = xr[i];
        sum += vec_sum(cache[k]);
      }
    }
    const float mean = block_reduce<Sum>(sum) / d;
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      if (threadIdx.x + k * blockDim.x < nvec) sq += vec_sq_dev(cache[k], mean);
    }
    const float rstd = rsqrtf(block_reduce<Sum>(sq) / d + p.eps);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < nvec) orow[i] = normalise(cache[k], p, i, mean, rstd);
    }
  } else {
    float sum = 0.0f;
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) sum += vec_sum(xr[i]);
    const float mean = block_reduce<Sum>(sum) / d;
    float sq = 0.0f;
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) sq += vec_sq_dev(xr[i], mean);
    const float rstd = rsqrtf(block_reduce<Sum>(sq) / d + p.eps);
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) orow[i] = normalise(xr[i], p, i, mean, rstd);
  }
}

template <typename T, int VEC>
void launch_width(const LayerNormParams& p, hipStream_t stream) {
  const int64_t nvec = p.d / VEC;
  const dim3 grid(static_cast<unsigned>(p.rows));
  if (nvec <= int64_t{kItems} * kMaxThreads) {
    // Enough threads that kItems vectors each cover the row, and at least 128 (two
    // waves) when the row has that many vectors, in whole waves.
    const int64_t want = std::max<int64_t>((nvec + kItems - 1) / kItems, std::min<int64_t>(nvec, 128));
    const int threads = static_cast<int>(std::min<int64_t>(kMaxThreads, (want + kWave - 1) / kWave * kWave));
    layer_norm_kernel<T, VEC, kItems><<<grid, threads, 0, stream>>>(p);
  } else {
    layer_norm_kernel<T, VEC, 0><<<grid, kMaxThreads, 0, stream>>>(p);
  }
}

template <typename T>
void launch(const LayerNormParams& p, hipStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = p.d % kVec == 0 && p.out.stride % kVec == 0 && p.x.stride % kVec == 0 &&
                   aligned(p.out.ptr, 16) && aligned(p.x.ptr, 16) &&
                   (!p.weight || aligned(p.weight, 16)) && (!p.bias || aligned(p.bias, 16));
  if (vec) {
    launch_width<T, kVec>(p, stream);
  } else {
    launch_width<T, 1>(p, stream);
  }
}

}  // namespace

namespace inference_kernels {

int layer_norm_launch(const LayerNormParams& p, void* stream) {
  if (p.rows <= 0 || p.d <= 0) return hipSuccess;
  // The wrapper refuses these first: the grid is one block per row, and the kernel
  // indexes vectors of a row with int.
  if (p.rows > INT32_MAX || p.d > INT32_MAX) return hipErrorInvalidConfiguration;
  const auto s = static_cast<hipStream_t>(stream);
  switch (p.dtype) {
    case DType::kFloat32: launch<float>(p, s); break;
    case DType::kFloat16: launch<Half>(p, s); break;
    case DType::kBFloat16: launch<BFloat16>(p, s); break;
    case DType::kFloat8E4M3: return hipErrorInvalidValue;  // not an input dtype
  }
  return hipGetLastError();
}

}  // namespace inference_kernels
