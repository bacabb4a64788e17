// What the standalone skinny-GEMM probes share (benchmarks/wgmma_probe.cu,
// benchmarks/tma_probe.cu; EXPERIMENTS, not part of the package): the error check, the
// random fp8 fill and the fp64 reference product.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

namespace probe {

// out[mm, r] = scale * sum_i w[r, i] * x[mm, i] in fp64, rounded to fp32
__global__ void reference(const uint8_t* w, const uint8_t* x, float* out, int n, int k, int m, float scale) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x, mm = blockIdx.y;
  if (r >= n) return;
  double s = 0;
  for (int i = 0; i < k; ++i) {
    __nv_fp8_e4m3 a, b;
    a.__x = w[int64_t(r) * k + i];
    b.__x = x[int64_t(mm) * k + i];
    s += double(float(a)) * double(float(b));
  }
  out[int64_t(mm) * n + r] = float(s * scale);
}

// finite e4m3 of magnitude 2^-3..2^3, either sign
__global__ void fill(uint8_t* p, int64_t count, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = uint8_t((h & 0x80) | (((h >> 8) % 7 + 4) << 3) | ((h >> 16) & 7));
  }
}

}  // namespace probe
