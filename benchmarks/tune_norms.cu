// Sweeps the row layouts of the norm kernels (cuda_kernels/row_kernel.cuh) and the
// block shapes of SwiGLU (cuda_kernels/activation.cuh) on the GPU and prints, per
// shape, the time of every layout next to the default (each op's pick_layout, the
// SwiGLU launcher's tiers) and the memory floor, so the defaults can be set from
// measurements. Not part of the package; built and run by
// scripts/h200_session.sh tune:
//
//   nvcc -std=c++20 -O3 -arch=sm_90 -Icommon -Icuda_kernels benchmarks/tune_norms.cu \
//        cuda_kernels/rms_norm.cu cuda_kernels/layer_norm.cu cuda_kernels/activation.cu -o /tmp/tune_norms
//   /tmp/tune_norms
//
//   /tmp/tune_norms --quick     # skips hidden 8192 and the dynamic-fp8 shapes
//   /tmp/tune_norms --only "silu_and_mul_fp8 fp16 512x13312,silu_mul bf16 4096x14336"
//                          # exactly these shapes, any rows and hidden size (run_named)
//   /tmp/tune_norms --rows-sweep  # RMSNorm at hidden 8192 and 16384 from 1 to 256 rows
//   /tmp/tune_norms --check-only  # outputs only, odd rows of hidden 16384 and of SwiGLU (sanitizers)
//   /tmp/tune_norms --defaults-only --only "..."  # the default layouts alone (A/B of two builds)
//   /tmp/tune_norms --explore   # the decode and lagging shapes of scripts/h200_session.sh norms_explore
//   /tmp/tune_norms --explore --only "rms bf16 1x4096,layer_norm fp16 4096x4096"
//
// Every forced layout's output is first compared with the default's on random
// inputs (at most 2 ulps apart in the output dtype, fp8 codes included; the
// residual of the fused ops bit for bit): a line ends in MISMATCH otherwise.
//
// Method as benchmarks/harness.py: one CUDA graph of >= 32 launches cycling through
// input copies whose total exceeds 200 MB (so inputs come from HBM), median over
// 9 replays; floor = compulsory bytes / the measured copy bandwidth.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "gpu_launchers.h"
#include "row_kernel.cuh"
#include "row_pipe.cuh"
#include "activation.cuh"

using namespace inference_kernels;
using inference_kernels::cuda::RowConfig;
using inference_kernels::cuda::SiluConfig;

#define CHECK(x)                                                                            \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

namespace {

double g_bw = 0;  // bytes/s, read + write
cudaStream_t g_stream;  // every launch goes here: the captured stream

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median microseconds of one launch(i) call, i cycling over `copies`.
float time_us(const std::function<int(int)>& launch, int copies) {
  const int calls = std::max(32, copies) / copies * copies;
  cudaStream_t s = g_stream;
  for (int i = 0; i < copies; ++i)
    if (launch(i) != 0) return -1;  // layout refused
  CHECK(cudaDeviceSynchronize());
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < calls; ++i)
    if (launch(i % copies) != 0) std::printf("launch failed in capture\n");
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  CHECK(cudaGraphLaunch(ge, s));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int r = 0; r < 9; ++r) {
    CHECK(cudaEventRecord(a, s));
    CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.0f / calls);
  }
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  return median(t);
}

double copy_bandwidth() {
  const size_t n = size_t(2) << 30;
  void *a, *b;
  CHECK(cudaMalloc(&a, n));
  CHECK(cudaMalloc(&b, n));
  CHECK(cudaMemset(a, 1, n));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int r = 0; r < 7; ++r) {
    CHECK(cudaEventRecord(e0));
    CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice));
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms);
  }
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  return 2.0 * n / (median(t) * 1e-3);
}

// Every layout worth trying for rows x nvec: a warp per row (short rows), or a
// block / cluster per row with 1..8 items and tx a multiple of 32 up to 256 that
// covers the row without a second idle half.
std::vector<RowConfig> layouts(int64_t nvec) {
  std::vector<RowConfig> out;
  RowConfig stream;
  stream.items = 0;  // the streaming kernel (one block per row, two passes)
  out.push_back(stream);
  for (int items : {1, 2, 4, 8}) {
    if (nvec <= 32 * items) {
      for (int rpb : {2, 4, 8}) {
        RowConfig c;
        c.tx = 32, c.rows_per_block = rpb, c.items = items;
        out.push_back(c);
      }
    }
  }
  for (int cluster : {1, 2, 4, 8}) {
    for (int items : {1, 2, 4, 8}) {
      const int64_t per = (nvec + cluster - 1) / cluster;
      const int64_t tx = (per + items - 1) / items;
      const int t = static_cast<int>((tx + 31) / 32 * 32);
      if (t < 64 || t > inference_kernels::cuda::kRowThreads) continue;
      RowConfig c;
      c.tx = t, c.cluster = cluster, c.items = items;
      out.push_back(c);
    }
  }
  // The flat kernel (one barrier a reduction, weight loaded before it): every block
  // size from a warp to kFlatThreads that covers the row with 1, 2 or 4 vectors a thread.
  for (int items : {1, 2, 4}) {
    const int64_t tx = (nvec + items - 1) / items;
    const int t = static_cast<int>((tx + 31) / 32 * 32);
    if (t > inference_kernels::cuda::kFlatThreads) continue;
    RowConfig c;
    c.tx = t, c.items = items, c.flat = true;
    out.push_back(c);
  }
  // The piped kernel (row_pipe.cuh): the flat layouts with 2, 4 or 8 vectors a thread in
  // persistent blocks, 2 to 4 rows in flight a block.
  for (int items : {2, 4, 8}) {
    const int64_t tx = (nvec + items - 1) / items;
    const int t = static_cast<int>((tx + 31) / 32 * 32);
    if (t < 64 || t > inference_kernels::cuda::piped_threads(items)) continue;
    for (int stages = 2; stages <= inference_kernels::cuda::kMaxStages; ++stages) {
      RowConfig c;
      c.tx = t, c.items = items, c.flat = true, c.stages = stages;
      out.push_back(c);
    }
  }
  // The exact-fit piped kernel (RowConfig::exact): rows of exactly items x
  // piped_threads(items) vectors, 2 stages (16-bit only; layer_norm at 4 items only).
  for (int items : {2, 4}) {
    const int t = inference_kernels::cuda::piped_threads(items);
    if (int64_t{t} * items != nvec) continue;
    RowConfig c;
    c.tx = t, c.items = items, c.flat = true, c.stages = 2, c.exact = true;
    out.push_back(c);
  }
  // The exact-fit flat kernel (RowConfig::exact, stages 0; 16-bit only): rows of exactly
  // items x tx vectors, tx a power of two from a warp to kExactThreads; each op takes the
  // block sizes its launcher instantiates (layer_norm 4 items at 32-512 threads and 2 at
  // 64, rms_norm 2 items at 128-1024 threads); the others fail to launch and are skipped.
  for (int items : {2, 4}) {
    if (nvec % items) continue;
    const int64_t tx = nvec / items;
    if (tx >= 32 && tx <= inference_kernels::cuda::kExactThreads && (tx & (tx - 1)) == 0) {
      RowConfig c;
      c.tx = static_cast<int>(tx), c.items = items, c.flat = true, c.exact = true;
      out.push_back(c);
    }
  }
  // The split kernel (row_split.cuh; RowConfig::exact with cluster > 1, 16-bit only):
  // clusters of 2-8 blocks a row, each a slice of items x tx vectors, tx a power of two
  // from 64 to 512, one row a cluster or two (r2); each op takes the shapes its
  // launcher instantiates.
  for (int cluster : {2, 4, 8}) {
    for (int items : {1, 2, 4}) {
      if (nvec % (cluster * items)) continue;
      const int64_t tx = nvec / (cluster * items);
      if (tx < 64 || tx > 512 || (tx & (tx - 1))) continue;
      RowConfig c;
      c.tx = static_cast<int>(tx), c.items = items, c.flat = true, c.exact = true, c.cluster = cluster;
      out.push_back(c);
      c.rows_per_block = 2;  // two rows a cluster (layer_norm 4 x 128 x 4 only; the rest refuse it)
      out.push_back(c);
    }
  }
  return out;
}

std::string str(const RowConfig& c) {
  char buf[64];
  if (c.items == 0) return "stream";
  if (c.stages) {
    std::snprintf(buf, sizeof buf, "piped tx%d i%d s%d%s", c.tx, c.items, c.stages, c.exact ? " exact" : "");
    return buf;
  }
  if (c.flat && c.cluster > 1) {
    std::snprintf(buf, sizeof buf, "split c%d tx%d i%d%s", c.cluster, c.tx, c.items, c.rows_per_block == 2 ? " r2" : "");
    return buf;
  }
  if (c.flat) {
    std::snprintf(buf, sizeof buf, "flat tx%d i%d%s", c.tx, c.items, c.exact ? " exact" : "");
    return buf;
  }
  std::snprintf(buf, sizeof buf, "tx%d r%d c%d i%d", c.tx, c.rows_per_block, c.cluster, c.items);
  return buf;
}

struct Buffers {
  std::vector<void*> p;
  Buffers(size_t bytes, int copies) {
    for (int i = 0; i < copies; ++i) {
      void* q;
      CHECK(cudaMalloc(&q, bytes));
      CHECK(cudaMemset(q, 0x3c, bytes));  // 0x3c3c: ~1.06 in fp16, ~0.011 in bf16: finite
      p.push_back(q);
    }
  }
  ~Buffers() {
    for (void* q : p) cudaFree(q);
  }
};

int g_max_copies = 64;  // --max-copies N: bench_swiglu.py uses 256, which at 8 rows of SwiGLU is 54 MB, about the L2
int copies_for(size_t bytes) {
  return static_cast<int>(std::clamp<size_t>((size_t(200) << 20) / std::max<size_t>(bytes, 1) + 1, 2, g_max_copies));
}

// --check-only: each layout's output against the default's, no timing (for
// compute-sanitizer at odd shapes).
bool g_check_only = false;
bool g_defaults_only = false;  // --defaults-only: time each shape's default layout alone

// Filled by main: the shapes to run (empty: all), from --only.
std::vector<std::string> g_only;

bool selected(const char* what) {
  return g_only.empty() || std::find(g_only.begin(), g_only.end(), std::string(what)) != g_only.end();
}

// Deterministic inputs in [lo, lo + span) for the output checks.
std::vector<float> pattern(size_t n, uint32_t seed, float lo, float span) {
  std::vector<float> v(n);
  for (auto& f : v) {
    seed = seed * 1664525u + 1013904223u;
    f = lo + span * float(seed >> 8) / float(1u << 24);
  }
  return v;
}

void upload(void* dst, const std::vector<float>& v, DType dt) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::kFloat16) {
      const __half b = __float2half(v[i]);
      std::memcpy(&h[i], &b, 2);
    } else {
      const __nv_bfloat16 b = __float2bfloat16(v[i]);
      std::memcpy(&h[i], &b, 2);
    }
  }
  CHECK(cudaMemcpy(dst, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
}

// Elements of a and b (esize 1: fp8, 2: fp16/bf16 bits) more than `ulps` apart.
size_t ulp_misses(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, int esize, int ulps) {
  auto ordered = [esize](const uint8_t* q) {  // sign-magnitude bits -> a monotonic integer
    const int v = esize == 1 ? int(q[0]) : int(q[0] | (q[1] << 8));
    const int sign = esize == 1 ? 0x80 : 0x8000;
    return (v & sign) ? -(v & (sign - 1)) : v;
  };
  size_t bad = 0;
  for (size_t i = 0; i + esize <= a.size(); i += esize) bad += std::abs(ordered(&a[i]) - ordered(&b[i])) > ulps;
  return bad;
}

// One run of a layout on copy 0 of fresh inputs; the output (and the residual) as bytes.
using Outputs = std::pair<std::vector<uint8_t>, std::vector<uint8_t>>;
using CheckRun = std::function<Outputs(const RowConfig*)>;

// One shape: every layout, then the default; prints one line per layout.
void sweep(const char* what, int64_t nvec, int64_t rows, double bytes,
           const std::function<int(int, const RowConfig*)>& launch, int copies,
           const CheckRun& check_run = nullptr, int out_esize = 2) {
  if (!selected(what)) return;
  const double floor_us = bytes / g_bw * 1e6;
  Outputs ref;
  if (check_run) ref = check_run(nullptr);
  const float def = g_check_only ? 0.0f : time_us([&](int i) { return launch(i, nullptr); }, copies);
  float best = def;
  std::string best_s = "default";
  for (const RowConfig& c : g_defaults_only ? std::vector<RowConfig>{} : layouts(nvec)) {
    if (rows * c.cluster > INT32_MAX) continue;
    std::string note;
    if (check_run) {
      const Outputs o = check_run(&c);
      if (o.first.empty()) continue;  // layout refused
      const size_t bad = ulp_misses(o.first, ref.first, out_esize, 2);
      if (bad) note += " MISMATCH(" + std::to_string(bad) + " elements > 2 ulps)";
      if (o.second != ref.second) note += " MISMATCH(residual)";
    }
    if (g_check_only) {
      std::printf("  %-28s %-22s checked%s\n", what, str(c).c_str(), note.c_str());
      continue;
    }
    const float t = time_us([&](int i) { return launch(i, &c); }, copies);
    if (t < 0) continue;
    std::printf("  %-28s %-22s %8.2f us  %4.0f%% floor%s\n", what, str(c).c_str(), t, 100 * floor_us / t,
                note.c_str());
    if (t < best) best = t, best_s = str(c);
  }
  std::printf("%-30s default %8.2f us (%3.0f%% floor %.2f us); best %-22s %8.2f us (%.2fx)\n",
              what, def, 100 * floor_us / def, floor_us, best_s.c_str(), best, def / best);
  std::fflush(stdout);
}

void rms(DType dt, int esize, int64_t rows, int64_t d, NormOut mode, bool fused) {
  const size_t row_bytes = rows * d * esize;
  {
    char name[96];
    std::snprintf(name, sizeof name, "rms%s%s %s %lldx%lld", fused ? "+add" : "",
                  mode == NormOut::kSame ? "" : (mode == NormOut::kFp8Static ? "+fp8" : "+fp8dyn"),
                  esize == 2 ? (dt == DType::kFloat16 ? "fp16" : "bf16") : "fp32", (long long)rows,
                  (long long)d);
    if (!selected(name)) return;  // before allocating anything
  }
  const int copies = copies_for(row_bytes * (fused ? 2 : 1));
  Buffers x(row_bytes, copies), res(fused ? row_bytes : 0, fused ? copies : 0);
  Buffers out(mode == NormOut::kSame ? row_bytes : rows * d, 1), w(d * esize, 1), sc(4 + rows * 4, 1);
  const float one = 1.0f;
  CHECK(cudaMemcpy(sc.p[0], &one, 4, cudaMemcpyHostToDevice));
  double bytes = row_bytes + (mode == NormOut::kSame ? row_bytes : rows * d) + d * esize;
  if (fused) bytes += 2.0 * row_bytes;
  char what[96];
  std::snprintf(what, sizeof what, "rms%s%s %s %lldx%lld", fused ? "+add" : "",
                mode == NormOut::kSame ? "" : (mode == NormOut::kFp8Static ? "+fp8" : "+fp8dyn"),
                esize == 2 ? (dt == DType::kFloat16 ? "fp16" : "bf16") : "fp32", (long long)rows,
                (long long)d);
  sweep(what, d * esize / 16, rows, bytes,
        [&](int i, const RowConfig* c) {
          NormParams p{};
          p.dtype = dt;
          p.mode = mode;
          p.out = {out.p[0], d};
          p.x = {x.p[i], d};
          p.res = fused ? Rows{res.p[i], d} : Rows{nullptr, 0};
          p.weight = w.p[0];
          p.scale = static_cast<const float*>(sc.p[0]);
          p.row_scales = static_cast<float*>(sc.p[0]) + 1;
          p.rows = rows, p.d = d, p.eps = 1e-6f;
          return rms_norm_launch_with(p, c, g_stream);
        },
        copies,
        esize == 2 ? CheckRun([&](const RowConfig* c) {
          // Fresh random inputs on copy 0 (fused ops update them in place), one launch.
          upload(x.p[0], pattern(rows * d, 1, -2.0f, 4.0f), dt);
          if (fused) upload(res.p[0], pattern(rows * d, 2, -2.0f, 4.0f), dt);
          upload(w.p[0], pattern(d, 3, 0.8f, 0.4f), dt);
          CHECK(cudaDeviceSynchronize());
          NormParams p{};
          p.dtype = dt;
          p.mode = mode;
          p.out = {out.p[0], d};
          p.x = {x.p[0], d};
          p.res = fused ? Rows{res.p[0], d} : Rows{nullptr, 0};
          p.weight = w.p[0];
          p.scale = static_cast<const float*>(sc.p[0]);
          p.row_scales = static_cast<float*>(sc.p[0]) + 1;
          p.rows = rows, p.d = d, p.eps = 1e-6f;
          Outputs o;
          if (rms_norm_launch_with(p, c, g_stream) != 0) return o;
          CHECK(cudaStreamSynchronize(g_stream));
          o.first.resize(mode == NormOut::kSame ? row_bytes : rows * d);
          CHECK(cudaMemcpy(o.first.data(), out.p[0], o.first.size(), cudaMemcpyDeviceToHost));
          if (fused) {
            o.second.resize(row_bytes);
            CHECK(cudaMemcpy(o.second.data(), res.p[0], row_bytes, cudaMemcpyDeviceToHost));
          }
          return o;
        }) : CheckRun(nullptr),
        mode == NormOut::kSame ? 2 : 1);
}

// TUNE_LN_AFFINE=w or none (environment): LayerNorm without its bias, or without weight
// and bias (what they cost); default both.
void ln(DType dt, int64_t rows, int64_t d) {
  const char* affine = std::getenv("TUNE_LN_AFFINE");
  const bool with_w = !affine || std::strcmp(affine, "none") != 0;
  const bool with_b = !affine || (std::strcmp(affine, "w") != 0 && std::strcmp(affine, "none") != 0);
  const size_t row_bytes = rows * d * 2;
  {
    char name[96];
    std::snprintf(name, sizeof name, "layer_norm %s %lldx%lld", dt == DType::kFloat16 ? "fp16" : "bf16",
                  (long long)rows, (long long)d);
    if (!selected(name)) return;
  }
  const int copies = copies_for(row_bytes);
  Buffers x(row_bytes, copies), out(row_bytes, 1), w(d * 2, 1), b(d * 2, 1);
  char what[96];
  std::snprintf(what, sizeof what, "layer_norm %s %lldx%lld", dt == DType::kFloat16 ? "fp16" : "bf16",
                (long long)rows, (long long)d);
  // The launch's parameters reading input copy i.
  auto params = [&](int i) {
    LayerNormParams p{};
    p.dtype = dt;
    p.out = {out.p[0], d};
    p.x = {x.p[i], d};
    p.weight = with_w ? w.p[0] : nullptr;
    p.bias = with_b ? b.p[0] : nullptr;
    p.rows = rows, p.d = d, p.eps = 1e-5f;
    return p;
  };
  sweep(what, d / 8, rows, 2.0 * row_bytes + 4.0 * d,
        [&](int i, const RowConfig* c) { return layer_norm_launch_with(params(i), c, g_stream); },
        copies, [&](const RowConfig* c) {
          upload(x.p[0], pattern(rows * d, 4, -1.5f, 4.0f), dt);
          upload(w.p[0], pattern(d, 5, -1.0f, 2.0f), dt);
          upload(b.p[0], pattern(d, 6, -1.0f, 2.0f), dt);
          CHECK(cudaDeviceSynchronize());
          Outputs o;
          if (layer_norm_launch_with(params(0), c, g_stream) != 0) return o;
          CHECK(cudaStreamSynchronize(g_stream));
          o.first.resize(row_bytes);
          CHECK(cudaMemcpy(o.first.data(), out.p[0], row_bytes, cudaMemcpyDeviceToHost));
          return o;
        });
}

__global__ void empty_kernel() {}

// The per-launch floor of this method (to tell a kernel's own time from the graph's
// per-node cost).
void latency_floor() {
  std::printf("empty kernel: %.2f us per graph node\n", time_us([](int) {
    empty_kernel<<<1, 32, 0, g_stream>>>();
    return int(cudaGetLastError());
  }, 1));
}

// silu_and_mul_fp8 (gate_up 2d fp16 -> fp8 d) and silu_mul (bf16 d), every block shape
// (cuda_kernels/activation.cuh) against the default. Each shape's output is checked
// against the default's bit for bit (the math does not depend on the shape).
void silu(int64_t rows, int64_t d, bool fp8) {
  char what[96];
  std::snprintf(what, sizeof what, "%s %lldx%lld", fp8 ? "silu_and_mul_fp8 fp16" : "silu_mul bf16",
                (long long)rows, (long long)(fp8 ? 2 * d : d));
  if (!selected(what)) return;
  const DType dt = fp8 ? DType::kFloat16 : DType::kBFloat16;
  const size_t in_bytes = rows * 2 * d * 2, out_bytes = rows * d * (fp8 ? 1 : 2);
  const int copies = copies_for(in_bytes);
  Buffers x(in_bytes, copies), out(out_bytes, 1), sc(4, 1);
  const float scale = 0.37f;
  CHECK(cudaMemcpy(sc.p[0], &scale, 4, cudaMemcpyHostToDevice));
  // fp8: gate and up interleaved per row (silu_and_mul); bf16: two separate tensors.
  auto operands = [&](int i) {
    SiluOperands a{};
    a.out = {out.p[0], d};
    if (fp8) {
      a.gate = {x.p[i], 2 * d};
      a.up = {static_cast<char*>(x.p[i]) + d * 2, 2 * d};
    } else {
      a.gate = {x.p[i], d};
      a.up = {static_cast<char*>(x.p[i]) + rows * d * 2, d};
    }
    a.rows = rows, a.d = d;
    return a;
  };
  auto launch = [&](int i, const SiluConfig* c) {
    return silu_mul_launch_with(dt, fp8 ? DType::kFloat8E4M3 : dt, operands(i),
                                fp8 ? static_cast<const float*>(sc.p[0]) : nullptr, c, g_stream);
  };
  auto output = [&](const SiluConfig* c) {
    std::vector<uint8_t> o(out_bytes);
    CHECK(cudaMemsetAsync(out.p[0], 0xFF, out_bytes, g_stream));  // g_stream does not wait for the legacy stream
    if (launch(0, c) != 0) return std::vector<uint8_t>();
    CHECK(cudaStreamSynchronize(g_stream));
    CHECK(cudaMemcpy(o.data(), out.p[0], out_bytes, cudaMemcpyDeviceToHost));
    return o;
  };
  upload(x.p[0], pattern(rows * 2 * d, 7, -6.0f, 12.0f), dt);
  const std::vector<uint8_t> ref = output(nullptr);
  const double floor_us = (in_bytes + out_bytes) / g_bw * 1e6;
  const float def = g_check_only ? 0.0f : time_us([&](int i) { return launch(i, nullptr); }, copies);
  float best = def;
  std::string best_s = "default";
  for (int lean = 0; lean < 2 && !g_defaults_only; ++lean) {
  for (int vec_bytes : {4, 8, 16}) {
    for (int threads : {64, 128, 256, 512}) {
      const SiluConfig c{threads, vec_bytes, lean == 1};
      const std::vector<uint8_t> o = output(&c);
      if (o.empty()) continue;
      const std::string name = std::string(lean ? "lean" : "silu") + " t" + std::to_string(threads) + " v" +
                               std::to_string(vec_bytes);
      if (g_check_only) {
        std::printf("  %-28s %-22s checked%s\n", what, name.c_str(), o == ref ? "" : " MISMATCH");
        continue;
      }
      const float t = time_us([&](int i) { return launch(i, &c); }, copies);
      std::printf("  %-28s %-22s %8.2f us  %4.0f%% floor%s\n", what, name.c_str(), t, 100 * floor_us / t,
                  o == ref ? "" : " MISMATCH");
      if (t > 0 && t < best) best = t, best_s = name;
    }
  }
  }
  uint32_t h = 2166136261u;  // FNV-1a of the default's output: A/B builds compare bits
  for (uint8_t b : ref) h = (h ^ b) * 16777619u;
  std::printf("%-30s default %8.2f us (%3.0f%% floor %.2f us); best %-22s %8.2f us (%.2fx); out %08x\n", what, def,
              100 * floor_us / def, floor_us, best_s.c_str(), best, def / best, h);
  std::fflush(stdout);
}

}  // namespace

// The decode shapes (1 and 8 rows) of the norms that trail Triton there, and the
// many-row shapes furthest from Liger or from the floor (scripts/h200_session.sh
// norms_explore).
void explore() {
  for (int64_t rows : {1, 8}) {
    rms(DType::kBFloat16, 2, rows, 4096, NormOut::kSame, false);
    rms(DType::kBFloat16, 2, rows, 4096, NormOut::kSame, true);
    rms(DType::kFloat16, 2, rows, 16384, NormOut::kFp8Static, true);
    ln(DType::kFloat16, rows, 4096);
  }
  rms(DType::kBFloat16, 2, 4096, 4096, NormOut::kSame, false);
  rms(DType::kBFloat16, 2, 4096, 4096, NormOut::kSame, true);
  for (auto [rows, d] : std::vector<std::pair<int64_t, int64_t>>{{1024, 16384}, {4096, 4096}}) {
    ln(DType::kFloat16, rows, d);
  }
}

// Issue 3's hidden sizes that fit the piped kernel's exact variant (8192 and 16384 in
// 16-bit) from 1 to 256 rows, where the streaming and cluster layouts ran before it.
void rows_sweep() {
  for (int64_t rows : {1, 8, 16, 32, 64, 128, 256}) {
    for (int64_t d : {8192, 16384}) {
      rms(DType::kBFloat16, 2, rows, d, NormOut::kSame, false);
      rms(DType::kBFloat16, 2, rows, d, NormOut::kSame, true);
    }
    rms(DType::kFloat16, 2, rows, 16384, NormOut::kFp8Static, true);
  }
}

// One --only name, as sweep prints it ("layer_norm bf16 768x16384", "rms+add+fp8 fp16
// 512x16384", "silu_and_mul_fp8 fp16 512x13312", "silu_mul bf16 4096x14336"), at any row
// count and hidden size; false if the name is none of those.
bool run_named(const std::string& name) {
  char op[32], dt[8];
  long long rows = 0, d = 0;
  if (std::sscanf(name.c_str(), "%31s %7s %lldx%lld", op, dt, &rows, &d) != 4 || rows <= 0 || d <= 0) return false;
  const std::string o = op, t = dt;
  const DType type = t == "fp16" ? DType::kFloat16 : t == "bf16" ? DType::kBFloat16 : DType::kFloat32;
  const int esize = t == "fp32" ? 4 : 2;
  if (t != "fp16" && t != "bf16" && t != "fp32") return false;
  if (o == "layer_norm" && esize == 2) {
    ln(type, rows, d);
  } else if (o == "silu_and_mul_fp8" && t == "fp16" && d % 2 == 0) {
    silu(rows, d / 2, true);
  } else if (o == "silu_mul" && t == "bf16") {
    silu(rows, d, false);
  } else if (o.rfind("rms", 0) == 0) {
    std::string rest = o.substr(3);
    const bool fused = rest.rfind("+add", 0) == 0;
    if (fused) rest = rest.substr(4);
    const NormOut mode = rest.empty() ? NormOut::kSame
                         : rest == "+fp8" ? NormOut::kFp8Static
                         : rest == "+fp8dyn" ? NormOut::kFp8Dynamic : NormOut(-1);
    if (mode == NormOut(-1)) return false;
    rms(type, esize, rows, d, mode, fused);
  } else {
    return false;
  }
  return true;
}

int main(int argc, char** argv) {
  CHECK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  bool quick = false, explore_only = false, rows_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--explore") {
      explore_only = true;
    } else if (a == "--rows-sweep") {
      rows_only = true;
    } else if (a == "--check-only") {
      g_check_only = true;
    } else if (a == "--defaults-only") {
      g_defaults_only = true;
    } else if (a == "--max-copies" && i + 1 < argc) {
      g_max_copies = std::max(2, std::atoi(argv[++i]));
    } else if (a == "--only" && i + 1 < argc) {
      std::string list = argv[++i];
      for (size_t b = 0, e; b <= list.size(); b = e + 1) {
        e = list.find(',', b);
        if (e == std::string::npos) e = list.size();
        if (e > b) g_only.push_back(list.substr(b, e - b));
      }
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--explore] [--rows-sweep] [--check-only] [--defaults-only] [--max-copies N] [--only \"name,name\"]\n", argv[0]);
      return 2;
    }
  }
  if (g_check_only) {  // odd row counts at hidden 16384, where the split layouts fit
    for (int64_t rows : {1, 3, 133}) {
      for (DType dt : {DType::kFloat16, DType::kBFloat16}) ln(dt, rows, 16384);
      rms(DType::kBFloat16, 2, rows, 16384, NormOut::kSame, false);
      rms(DType::kBFloat16, 2, rows, 16384, NormOut::kSame, true);
      rms(DType::kFloat16, 2, rows, 16384, NormOut::kFp8Static, true);
      rms(DType::kFloat16, 2, rows, 16384, NormOut::kFp8Dynamic, false);
      // SwiGLU's shapes with a row of 833 / 1793 16-byte vectors: a warp part past the end
      silu(rows, 6664, true);
      silu(rows, 14344, false);
    }
    return 0;
  }
  g_bw = copy_bandwidth();
  std::printf("copy bandwidth (read+write): %.0f GB/s\n", g_bw / 1e9);
  latency_floor();
  if (explore_only) {
    explore();
    return 0;
  }
  if (rows_only) {
    rows_sweep();
    return 0;
  }
  if (!g_only.empty()) {  // exactly the named shapes, in order
    for (const std::string& name : g_only) {
      if (!run_named(name)) std::fprintf(stderr, "tune_norms: no such shape: %s\n", name.c_str());
    }
    return 0;
  }
  for (int64_t rows : {1, 4, 8, 16, 32, 64, 128, 512, 2048}) silu(rows, 6656, true);
  for (int64_t rows : {1, 8, 32, 128, 512, 4096}) silu(rows, 14336, false);
  for (int64_t d : {4096, 8192, 16384}) {
    if (quick && d == 8192) continue;
    for (int64_t rows : {1, 16, 256, 4096}) rms(DType::kBFloat16, 2, rows, d, NormOut::kSame, false);
  }
  for (int64_t rows : {1, 16, 256, 4096}) rms(DType::kBFloat16, 2, rows, 4096, NormOut::kSame, true);
  for (int64_t rows : {1, 128, 512, 1024, 2048}) {
    rms(DType::kFloat16, 2, rows, 16384, NormOut::kFp8Static, true);
    if (!quick) rms(DType::kFloat16, 2, rows, 16384, NormOut::kFp8Dynamic, true);
  }
  for (auto [rows, d] : std::vector<std::pair<int64_t, int64_t>>{
           {4096, 4096}, {16384, 1024}, {1024, 16384}, {8192, 5120}, {4096, 8192}}) {
    ln(DType::kFloat16, rows, d);
    ln(DType::kBFloat16, rows, d);
  }
  // The edges of LayerNorm's exact fits: a 64-thread block (hidden 2048), and hidden
  // 16384 below, at and past 132 rows (flat exact fit, then piped); not with --quick.
  if (!quick) {
    for (auto [rows, d] : std::vector<std::pair<int64_t, int64_t>>{
             {16384, 2048}, {1, 16384}, {64, 16384}, {132, 16384}, {133, 16384}, {1, 8192}, {264, 16384},
             {265, 16384}, {384, 16384}, {512, 16384}, {768, 16384}, {2048, 16384}, {4096, 16384}, {1024, 8192}}) {
      ln(DType::kBFloat16, rows, d);
    }
    // Where LayerNorm's split rows (hidden 16384) turn to the flat and piped fits.
    for (int64_t rows : {1, 64, 127, 128, 160, 192, 224, 263, 384, 512, 768, 2048}) {
      ln(DType::kFloat16, rows, 16384);
      if (rows >= 127 && rows < 264) ln(DType::kBFloat16, rows, 16384);
    }
    // RMSNorm's flat exact fit at hidden 4096 and 2048 (rms_norm.cu's pick_layout): fp16,
    // the fused kernel from 300 to 2048 rows, static fp8 with the residual.
    for (int64_t rows : {1, 256, 4096}) rms(DType::kFloat16, 2, rows, 4096, NormOut::kSame, false);
    for (int64_t rows : {300, 512, 1024, 2048}) rms(DType::kBFloat16, 2, rows, 4096, NormOut::kSame, true);
    for (int64_t rows : {1, 256, 512, 4096}) rms(DType::kFloat16, 2, rows, 4096, NormOut::kFp8Static, true);
    // fp8 at hidden 4096 where the flat exact fit is not the default (unmeasured): the
    // dynamic scale with the residual, and static fp8 without it.
    for (int64_t rows : {1, 256, 4096}) {
      rms(DType::kFloat16, 2, rows, 4096, NormOut::kFp8Dynamic, true);
      rms(DType::kFloat16, 2, rows, 4096, NormOut::kFp8Static, false);
    }
    for (int64_t rows : {1, 256, 4096}) {
      rms(DType::kBFloat16, 2, rows, 2048, NormOut::kSame, false);
      rms(DType::kBFloat16, 2, rows, 2048, NormOut::kSame, true);
    }
    // add + RMSNorm at hidden 8192 and 16384 (the flat exact fit at 512 and 1024 threads
    // among the layouts), and where hidden 16384 turns from the piped fit to the flat one.
    for (int64_t d : {8192, 16384}) {
      for (int64_t rows : {1, 256, 4096}) rms(DType::kBFloat16, 2, rows, d, NormOut::kSame, true);
    }
    for (int64_t rows : {512, 1024, 2048}) {
      rms(DType::kBFloat16, 2, rows, 16384, NormOut::kSame, false);
      rms(DType::kBFloat16, 2, rows, 16384, NormOut::kSame, true);
    }
    rms(DType::kFloat16, 2, 1024, 16384, NormOut::kFp8Static, true);
    // LayerNorm at hidden 1024 from 256 rows (the exact fit of 64 threads x 2 vectors).
    for (int64_t rows : {256, 1024, 2048, 4096, 8192}) ln(DType::kFloat16, rows, 1024);
  }
  return 0;
}
