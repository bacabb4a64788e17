// RMSNorm and fused residual-add + RMSNorm on NVIDIA GPUs.
//
// One block per row. Pass 1 reads the row (adds the residual and writes the
// rounded sum back, when fused) and reduces the sum of squares in fp32; pass 2
// re-reads the row, which the first pass left in L1/L2, and writes the output.
// Rows that are 16-byte aligned move in 16-byte vectors; any other row takes the
// scalar path, so every size and stride the checks accept is handled.
// Rounding matches the CPU backend and HF's LlamaRMSNorm (see rms_norm.cpp).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstdint>

#include "torch_binding.h"
#include "torch_checks.h"

namespace {

constexpr int kMaxThreads = 1024;

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block, returned to every thread.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[kMaxThreads / 32];
  __shared__ float total;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int nwarps = (blockDim.x + 31) / 32;
    v = lane < nwarps ? partial[lane] : 0.0f;
    v = warp_sum(v);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

// x and out may be the same row (rms_norm with out=x): every element is read
// before the same thread writes it, so neither pointer is __restrict__.
// FUSED: res <- round(x + res); x <- normalise(res) (out == x).
template <typename T, int VEC, bool FUSED>
__global__ void rms_norm_kernel(T* out, int64_t out_stride, const T* x, int64_t x_stride,
                                T* res, int64_t res_stride, const T* __restrict__ weight,
                                int64_t d, float eps) {
  using P = Pack<T, VEC>;
  const int64_t row = blockIdx.x;
  const P* xr = reinterpret_cast<const P*>(x + row * x_stride);
  P* rr = FUSED ? reinterpret_cast<P*>(res + row * res_stride) : nullptr;
  P* orow = reinterpret_cast<P*>(out + row * out_stride);
  const P* w = reinterpret_cast<const P*>(weight);
  const int64_t nvec = d / VEC;

  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
    P a = xr[i];
    if constexpr (FUSED) {
      const P b = rr[i];
#pragma unroll
      for (int k = 0; k < VEC; ++k) a.v[k] = T(float(a.v[k]) + float(b.v[k]));
      rr[i] = a;
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float f = float(a.v[k]);
      sum_sq += f * f;
    }
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq) / float(d) + eps);

  const P* src = FUSED ? rr : xr;
  for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
    const P a = src[i];
    const P g = w[i];
    P y;
#pragma unroll
    for (int k = 0; k < VEC; ++k) y.v[k] = T(float(T(float(a.v[k]) * inv_rms)) * float(g.v[k]));
    orow[i] = y;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, bool FUSED>
void launch(T* out, int64_t out_stride, const T* x, int64_t x_stride, T* res, int64_t res_stride,
            const T* weight, int64_t rows, int64_t d, double eps, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = d % kVec == 0 && out_stride % kVec == 0 && x_stride % kVec == 0 &&
                   (!FUSED || res_stride % kVec == 0) && aligned16(out) && aligned16(x) &&
                   (!FUSED || aligned16(res)) && aligned16(weight);
  const int64_t work = vec ? d / kVec : d;
  const int threads = static_cast<int>(std::min<int64_t>(kMaxThreads, (work + 31) / 32 * 32));
  TORCH_CHECK(rows <= INT32_MAX, "at most 2^31-1 rows are supported, got ", rows);
  const dim3 grid(static_cast<unsigned>(rows));
  if (vec) {
    rms_norm_kernel<T, kVec, FUSED><<<grid, threads, 0, stream>>>(
        out, out_stride, x, x_stride, res, res_stride, weight, d, static_cast<float>(eps));
  } else {
    rms_norm_kernel<T, 1, FUSED><<<grid, threads, 0, stream>>>(
        out, out_stride, x, x_stride, res, res_stride, weight, d, static_cast<float>(eps));
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void rms_norm_cuda(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, double eps) {
  using namespace inference_kernels;
  check_rms_norm_args(out, x, weight, eps, c10::DeviceType::CUDA);
  const RowView xv = row_view(x, "x");
  const RowView ov = row_view(out, "out");
  if (xv.rows == 0 || xv.cols == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  IK_DISPATCH_FLOAT_TYPES(x.scalar_type(), "rms_norm_cuda", [&] {
    launch<scalar_t, false>(out.data_ptr<scalar_t>(), ov.row_stride, x.const_data_ptr<scalar_t>(),
                            xv.row_stride, nullptr, 0, weight.const_data_ptr<scalar_t>(), xv.rows,
                            xv.cols, eps, stream);
  });
}

void fused_add_rms_norm_cuda(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
                             double eps) {
  using namespace inference_kernels;
  check_fused_add_rms_norm_args(x, residual, weight, eps, c10::DeviceType::CUDA);
  const RowView xv = row_view(x, "x");
  const RowView rv = row_view(residual, "residual");
  if (xv.rows == 0 || xv.cols == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  IK_DISPATCH_FLOAT_TYPES(x.scalar_type(), "fused_add_rms_norm_cuda", [&] {
    scalar_t* xp = x.data_ptr<scalar_t>();
    launch<scalar_t, true>(xp, xv.row_stride, xp, xv.row_stride, residual.data_ptr<scalar_t>(),
                           rv.row_stride, weight.const_data_ptr<scalar_t>(), xv.rows, xv.cols, eps,
                           stream);
  });
}
