// Shaders the harness must refuse (tests/test_metal_harness.py): control flow that
// splits the threads of a threadgroup, or the lanes of a SIMD-group, at a barrier or
// a SIMD collective. Each is undefined behaviour on an Apple GPU (a hang or garbage).
#include <metal_stdlib>
using namespace metal;

// Half the threads return before the barrier the other half waits at.
kernel void half_skip_barrier(device float* out [[buffer(0)]],
                              uint tid [[thread_index_in_threadgroup]]) {
  if (tid < 16) {
    return;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);  // SKIPPED_BARRIER
  out[tid] = 1.0f;
}

// Even and odd threads wait at two different barriers.
kernel void two_barriers(device float* out [[buffer(0)]],
                         uint tid [[thread_index_in_threadgroup]]) {
  if (tid % 2 == 0) {
    threadgroup_barrier(mem_flags::mem_threadgroup);  // EVEN_BARRIER
  } else {
    threadgroup_barrier(mem_flags::mem_threadgroup);  // ODD_BARRIER
  }
  out[tid] = 1.0f;
}

// The lanes of one SIMD-group reduce at two different simd_sum calls.
kernel void split_simd_sum(device float* out [[buffer(0)]],
                           uint lane [[thread_index_in_simdgroup]]) {
  float s;
  if (lane < 16) {
    s = simd_sum(1.0f);  // LOW_LANES
  } else {
    s = simd_sum(2.0f);  // HIGH_LANES
  }
  out[lane] = s;
}
