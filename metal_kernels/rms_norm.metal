// RMSNorm and fused residual-add + RMSNorm, rounded as cpu_kernels/rms_norm.cpp (HF's
// LlamaRMSNorm, vLLM): y = round(weight * round(x * inv_rms)), the sum of squares in
// fp32, and for the fused op residual <- round(x + residual) is what gets normalised.
//
// One threadgroup per row (rows contiguous, d elements each); its threads stride over
// the row. The fp32 sum of squares is reduced with simd_sum inside each SIMD-group,
// the per-SIMD-group partials meet in threadgroup memory, and the first SIMD-group
// sums them. Any threadgroup size up to 1024 (32 SIMD-groups) works; the host picks
// one (a multiple of 32 keeps every SIMD-group full).
#include <metal_stdlib>
using namespace metal;

// The row's 1 / rms from each thread's partial sum of squares; every thread gets it.
inline float row_inv_rms(float partial, uint d, float eps, threadgroup float* partials,
                         threadgroup float* total, uint lane, uint simd, uint nsimd) {
  const float s = simd_sum(partial);
  if (lane == 0) {
    partials[simd] = s;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (simd == 0) {
    const float t = simd_sum(lane < nsimd ? partials[lane] : 0.0f);
    if (lane == 0) {
      // 1 / sqrt, not rsqrt: the CPU kernel's rounding (fast::rsqrt is approximate).
      *total = 1.0f / precise::sqrt(t / float(d) + eps);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return *total;
}

template <typename T>
void norm_row(device const T* x, device T* res, device const T* w, device T* out, uint d,
              float eps, threadgroup float* partials, threadgroup float* total, uint tid,
              uint nthreads, uint lane, uint simd, uint nsimd) {
  float acc = 0.0f;
  if (res) {
    for (uint i = tid; i < d; i += nthreads) {
      const T s = T(float(x[i]) + float(res[i]));  // rounded to the dtype, then normalised
      res[i] = s;
      acc = fma(float(s), float(s), acc);
    }
  } else {
    for (uint i = tid; i < d; i += nthreads) {
      const float v = float(x[i]);
      acc = fma(v, v, acc);
    }
  }
  const float inv = row_inv_rms(acc, d, eps, partials, total, lane, simd, nsimd);
  device const T* src = res ? (device const T*)res : x;
  for (uint i = tid; i < d; i += nthreads) {
    const T y = T(float(src[i]) * inv);  // HF: rounded before it meets the weight
    out[i] = T(float(y) * float(w[i]));
  }
}

// One threadgroup per row. Buffers: x, weight, out (may be x), d, eps.
template <typename T>
kernel void rms_norm(device const T* x [[buffer(0)]],
                     device const T* w [[buffer(1)]],
                     device T* out [[buffer(2)]],
                     constant uint& d [[buffer(3)]],
                     constant float& eps [[buffer(4)]],
                     uint row [[threadgroup_position_in_grid]],
                     uint tid [[thread_index_in_threadgroup]],
                     uint nthreads [[threads_per_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]],
                     uint simd [[simdgroup_index_in_threadgroup]],
                     uint nsimd [[simdgroups_per_threadgroup]]) {
  threadgroup float partials[32];
  threadgroup float total;
  const ulong base = ulong(row) * d;
  norm_row<T>(x + base, nullptr, w, out + base, d, eps, partials, &total, tid, nthreads,
              lane, simd, nsimd);
}

// residual <- round(x + residual); x <- rms_norm(residual). Buffers: x, residual,
// weight, d, eps.
template <typename T>
kernel void fused_add_rms_norm(device T* x [[buffer(0)]],
                               device T* res [[buffer(1)]],
                               device const T* w [[buffer(2)]],
                               constant uint& d [[buffer(3)]],
                               constant float& eps [[buffer(4)]],
                               uint row [[threadgroup_position_in_grid]],
                               uint tid [[thread_index_in_threadgroup]],
                               uint nthreads [[threads_per_threadgroup]],
                               uint lane [[thread_index_in_simdgroup]],
                               uint simd [[simdgroup_index_in_threadgroup]],
                               uint nsimd [[simdgroups_per_threadgroup]]) {
  threadgroup float partials[32];
  threadgroup float total;
  const ulong base = ulong(row) * d;
  norm_row<T>(x + base, res + base, w, x + base, d, eps, partials, &total, tid, nthreads,
              lane, simd, nsimd);
}

// The host-visible names, one per dtype (ggml-metal's spelling of instances).
template [[host_name("rms_norm_f32")]] kernel decltype(rms_norm<float>) rms_norm<float>;
template [[host_name("rms_norm_f16")]] kernel decltype(rms_norm<half>) rms_norm<half>;
template [[host_name("rms_norm_bf16")]] kernel decltype(rms_norm<bfloat>) rms_norm<bfloat>;
template [[host_name("fused_add_rms_norm_f32")]]
    kernel decltype(fused_add_rms_norm<float>) fused_add_rms_norm<float>;
template [[host_name("fused_add_rms_norm_f16")]]
    kernel decltype(fused_add_rms_norm<half>) fused_add_rms_norm<half>;
template [[host_name("fused_add_rms_norm_bf16")]]
    kernel decltype(fused_add_rms_norm<bfloat>) fused_add_rms_norm<bfloat>;
