// What the standalone probes share (benchmarks/wgmma_probe.cu, benchmarks/tma_probe.cu,
// and for its error check and graph timer benchmarks/q4k_imma_probe.cu; EXPERIMENTS, not
// part of the package): the error check, the random fp8 fill, the fp64 reference product,
// the correctness check and the graph timer.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

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

// max |ours - ref| / max |ref| over an [m, n] product of random fp8 w [n, k] and x [m, k]:
// run(w, x, out) adds scale 0.5 times the product into the zeroed fp32 out.
template <typename Run>
double check_product(int n, int k, int m, Run run) {
  uint8_t *w, *x;
  float *out, *ref;
  CK(cudaMalloc(&w, size_t(n) * k));
  CK(cudaMalloc(&x, size_t(m) * k));
  CK(cudaMalloc(&out, size_t(m) * n * 4));
  CK(cudaMalloc(&ref, size_t(m) * n * 4));
  fill<<<256, 256>>>(w, int64_t(n) * k, 1234u + n);
  fill<<<256, 256>>>(x, int64_t(m) * k, 99u + m);
  CK(cudaMemset(out, 0, size_t(m) * n * 4));
  CK(run(w, x, out));
  reference<<<dim3((n + 127) / 128, m), 128>>>(w, x, ref, n, k, m, 0.5f);
  CK(cudaDeviceSynchronize());
  std::vector<float> o(size_t(m) * n), r(size_t(m) * n);
  CK(cudaMemcpy(o.data(), out, o.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r.data(), ref, r.size() * 4, cudaMemcpyDeviceToHost));
  double err = 0, mx = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    err = std::max(err, double(std::abs(o[i] - r[i])));
    mx = std::max(mx, double(std::abs(r[i])));
  }
  cudaFree(w), cudaFree(x), cudaFree(out), cudaFree(ref);
  return err / std::max(mx, 1e-30);
}

// Median us a launch over 12 replays of a CUDA graph of 4 x `copies` launches:
// launch(i, stream) issues the one on weight copy i (warmed up, and checked, first).
template <typename Launch>
float graph_time_us(int copies, Launch launch) {
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int i = 0; i < copies; ++i) CK(launch(i, st));  // outside the capture (attributes, errors)
  CK(cudaStreamSynchronize(st));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  const int reps = 4;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int r = 0; r < reps; ++r)
    for (int i = 0; i < copies; ++i) launch(i, st);
  CK(cudaStreamEndCapture(st, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  std::vector<float> ts;
  for (int it = 0; it < 12; ++it) {
    cudaEventRecord(e0, st);
    cudaGraphLaunch(exec, st);
    cudaEventRecord(e1, st);
    CK(cudaEventSynchronize(e1));
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    ts.push_back(ms * 1000.f / (reps * copies));
  }
  std::sort(ts.begin(), ts.end());
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec), cudaGraphDestroy(graph), cudaStreamDestroy(st);
  return ts[ts.size() / 2];
}

// PROBE_SHAPES=N:K,N:K,..: the timed weights (default: issue 4's three).
inline std::vector<std::pair<int, int>> timed_shapes() {
  std::vector<std::pair<int, int>> shapes = {{2304, 16384}, {13312, 16384}, {16384, 6656}};
  if (const char* e = std::getenv("PROBE_SHAPES")) {
    shapes.clear();
    for (const char* q = e; *q; ++q)
      if (q == e || q[-1] == ',') shapes.emplace_back(std::atoi(q), std::atoi(std::strchr(q, ':') + 1));
  }
  return shapes;
}

// A timed weight [n, k] in `copies` rotated copies (at least 8 and 400 MB, so none is read
// from L2), 32 rows of activation and an [32, n] fp32 output, random fp8.
struct Operands {
  int n, k, copies;
  uint8_t *w, *x;
  float* out;
  Operands(int n_, int k_) : n(n_), k(k_) {
    const size_t wbytes = size_t(n) * k;
    copies = std::max<int>(8, int((400ull << 20) / wbytes) + 1);
    CK(cudaMalloc(&w, wbytes * copies));
    CK(cudaMalloc(&x, size_t(32) * k));
    CK(cudaMalloc(&out, size_t(32) * n * 4));
    fill<<<1024, 256>>>(w, int64_t(wbytes) * copies, 7u);
    fill<<<64, 256>>>(x, int64_t(32) * k, 8u);
    CK(cudaDeviceSynchronize());
  }
  ~Operands() { cudaFree(w), cudaFree(x), cudaFree(out); }
  Operands(const Operands&) = delete;
  Operands& operator=(const Operands&) = delete;
};

// The GPU's name and SM count, printed; returns the SM count.
inline int print_device() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  return prop.multiProcessorCount;
}

}  // namespace probe
