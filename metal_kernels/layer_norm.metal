// LayerNorm over the last dimension, as cpu_kernels/layer_norm.cpp (torch's
// F.layer_norm): y = (x - mean) * rstd * weight + bias in fp32, rounded once to the
// dtype; biased variance; weight and bias optional.
//
// Statistics in two passes, as the CPU kernel: the mean first, then the mean of
// (x - mean)^2. One pass of sum and sum of squares cancels catastrophically when
// |mean| >> std. The second pass (and the output pass) re-read a row that the first
// brought into the GPU's caches.
//
// One threadgroup per row; its threads stride over the row. Each reduction is a
// simd_sum inside every SIMD-group, the per-SIMD-group partials through threadgroup
// memory, and a simd_sum of those by the first SIMD-group. Any threadgroup size up to
// 1024 works (a multiple of 32 keeps every SIMD-group full).
#include <metal_stdlib>
using namespace metal;

// The row total of each thread's `partial`, returned to every thread. The barrier
// after the first SIMD-group reads `partials` also keeps the next call's writes to
// `partials` from racing with that read.
inline float row_total(float partial, threadgroup float* partials, threadgroup float* total,
                       uint lane, uint simd, uint nsimd) {
  const float s = simd_sum(partial);
  if (lane == 0) {
    partials[simd] = s;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (simd == 0) {
    const float t = simd_sum(lane < nsimd ? partials[lane] : 0.0f);
    if (lane == 0) {
      *total = t;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return *total;
}

// Buffers: x, weight, bias, out (may be x), d, the row strides (elements) of x and
// out, flags (1: weight given, 2: bias given; a missing one's buffer is never read),
// eps.
template <typename T>
kernel void layer_norm(device const T* x [[buffer(0)]],
                       device const T* w [[buffer(1)]],
                       device const T* b [[buffer(2)]],
                       device T* out [[buffer(3)]],
                       constant uint& d [[buffer(4)]],
                       constant uint& x_stride [[buffer(5)]],
                       constant uint& out_stride [[buffer(6)]],
                       constant uint& flags [[buffer(7)]],
                       constant float& eps [[buffer(8)]],
                       uint row [[threadgroup_position_in_grid]],
                       uint tid [[thread_index_in_threadgroup]],
                       uint nthreads [[threads_per_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]],
                       uint simd [[simdgroup_index_in_threadgroup]],
                       uint nsimd [[simdgroups_per_threadgroup]]) {
  threadgroup float partials[32];
  threadgroup float total;
  device const T* xr = x + ulong(row) * x_stride;
  device T* o = out + ulong(row) * out_stride;

  float acc = 0.0f;
  for (uint i = tid; i < d; i += nthreads) {
    acc += float(xr[i]);
  }
  // sum / d, correctly rounded (fast math's division is approximate), as the CPU.
  const float mean = precise::divide(row_total(acc, partials, &total, lane, simd, nsimd), float(d));

  acc = 0.0f;
  for (uint i = tid; i < d; i += nthreads) {
    const float c = float(xr[i]) - mean;
    acc = fma(c, c, acc);
  }
  const float var = precise::divide(row_total(acc, partials, &total, lane, simd, nsimd), float(d));
  const float rstd = precise::divide(1.0f, precise::sqrt(var + eps));

  // Every thread has passed both reductions' barriers, so all reads of x are done
  // before any write: out may be x.
  const bool has_w = (flags & 1u) != 0, has_b = (flags & 2u) != 0;
  for (uint i = tid; i < d; i += nthreads) {
    float y = (float(xr[i]) - mean) * rstd;
    if (has_w) {
      y *= float(w[i]);
    }
    if (has_b) {
      y += float(b[i]);
    }
    o[i] = T(y);
  }
}

template [[host_name("layer_norm_f32")]] kernel decltype(layer_norm<float>) layer_norm<float>;
template [[host_name("layer_norm_f16")]] kernel decltype(layer_norm<half>) layer_norm<half>;
template [[host_name("layer_norm_bf16")]] kernel decltype(layer_norm<bfloat>) layer_norm<bfloat>;
