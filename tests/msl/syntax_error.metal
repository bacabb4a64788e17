// A shader with a syntax error: the compiler's message must name this file and line.
#include <metal_stdlib>
using namespace metal;

kernel void broken(device float* out [[buffer(0)]],
                   uint tid [[thread_position_in_grid]]) {
  out[tid] = 2.0f * ;  // SYNTAX_ERROR
}
