// EXPERIMENT (issues 3 and 5; not part of the package): can any way of moving the bytes
// beat torch's device copy at the norm goals' sizes, and does LayerNorm follow?
//
// Issue 5 asks for fp16 LayerNorm 4096 x 4096 in <= 17.6 us; torch's copy of the same
// 33.5 MB each way takes 17.82 us (BENCHMARKS.md, fifth session), our kernel 18.88. So
// the goal needs a better copy first. Timed here, on the same rotated buffers (8 copies,
// CUDA-graph replays, medians, as probe_util.cuh's timer):
//   - cudaMemcpyAsync;
//   - one-shot LDG.128 / STG.128 kernels, U vectors a thread (all loads, then all
//     stores), with and without streaming cache hints (ld.global.cs / st.global.cs);
//   - a persistent grid-stride LDG/STG loop;
//   - bulk copies (cp.async.bulk, one thread a block): chunks through a ring of S
//     shared-memory stages, each stored back by a bulk store as soon as it lands;
//   - silu_and_mul_fp8 (issue 3) at 512 and 2048 rows of 13312 fp16: the package's kernel and
//     persistent blocks with each row bulk-loaded S rows ahead;
//   - LayerNorm 4096 wide, persistent blocks: rows bulk-loaded S ahead into a ring,
//     normalised from shared memory, written by STG or through a bulk store; against
//     the package's layer_norm on the same buffers (and checked against it).
//
//   nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a -Icommon -Icuda_kernels \
//     benchmarks/copy_probe.cu cuda_kernels/layer_norm.cu cuda_kernels/activation.cu -o /tmp/copy_probe
//   /tmp/copy_probe            (PROBE_SANITIZE=1: small sizes, for compute-sanitizer)
//
// Measured (s26b, BENCHMARKS.md twenty-sixth session): no way of copying beat 17.82 us at
// 33.5 MB each way or 33.52 at 67 MB; the bulk-loaded LayerNorm and SwiGLU were slower
// than the package's kernels. Kept as the evidence for those goals.
#include <cuda_fp16.h>

#include "gpu_launchers.h"
#include "probe_util.cuh"
#include "ptx.cuh"
#include "tma.cuh"

using namespace inference_kernels::cuda;

namespace {

// 1-D bulk copies (no tensor map; here, not in tma.cuh, since no package kernel uses them,
// as measured below): `bytes` (a multiple of 16, both ends 16-byte aligned)
// from global memory into shared memory, counted on `bar`; and from shared memory to
// global memory in bulk groups, which a thread commits and then waits for: .read only
// until the shared memory may be reused, plain until the writes are done.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, int bytes, uint32_t bar) {
#if IK_WGMMA
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#else
  (void)dst, (void)src, (void)bytes, (void)bar;
  __trap();
#endif
}

__device__ __forceinline__ void bulk_store(void* dst, uint32_t src, int bytes) {
#if IK_WGMMA
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
#else
  (void)dst, (void)src, (void)bytes;
  __trap();
#endif
}

__device__ __forceinline__ void bulk_commit() {
#if IK_WGMMA
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}

// At most N of this thread's committed groups still read shared memory (READ) or still
// write global memory (!READ).
template <int N, bool READ>
__device__ __forceinline__ void bulk_wait() {
#if IK_WGMMA
  if constexpr (READ)
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
  else
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// Orders this thread's shared-memory writes before the async proxy's reads (a bulk store
// another thread issues after a barrier).
__device__ __forceinline__ void fence_async_smem() {
#if IK_WGMMA
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

template <int LD>
__device__ __forceinline__ uint4 load16(const uint4* p) {
  if constexpr (LD == 1) return __ldcs(p);
  else if constexpr (LD == 2) return __ldg(p);
  else return *p;
}

template <int ST>
__device__ __forceinline__ void store16(uint4* p, uint4 v) {
  if constexpr (ST == 1) __stcs(p, v);
  else *p = v;
}

// U vectors a thread, the block's T * U vectors contiguous.
template <int U, int LD, int ST>
__global__ void vec_copy(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t n) {
  const int64_t base = int64_t(blockIdx.x) * blockDim.x * U + threadIdx.x;
  uint4 v[U];
#pragma unroll
  for (int k = 0; k < U; ++k)
    if (base + k * blockDim.x < n) v[k] = load16<LD>(src + base + k * blockDim.x);
#pragma unroll
  for (int k = 0; k < U; ++k)
    if (base + k * blockDim.x < n) store16<ST>(dst + base + k * blockDim.x, v[k]);
}

template <int U>
__global__ void vec_copy_persist(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x * U;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.x * U + threadIdx.x; base < n; base += step) {
    uint4 v[U];
#pragma unroll
    for (int k = 0; k < U; ++k)
      if (base + k * blockDim.x < n) v[k] = src[base + k * blockDim.x];
#pragma unroll
    for (int k = 0; k < U; ++k)
      if (base + k * blockDim.x < n) dst[base + k * blockDim.x] = v[k];
  }
}

// The block's chunks: contiguous ([lo, hi) of the chunk range) or interleaved (b + j * G).
struct Chunks {
  int64_t first, count, step;
  __device__ Chunks(int64_t n, bool contiguous) {
    const int64_t b = blockIdx.x, g = gridDim.x;
    if (contiguous) {
      first = b * n / g, count = (b + 1) * n / g - first, step = 1;
    } else {
      first = b, count = b < n ? (n - b + g - 1) / g : 0, step = g;
    }
  }
  __device__ int64_t operator[](int64_t j) const { return first + j * step; }
};

// One thread: loads S - 1 chunks ahead; each landed chunk goes straight back out by a
// bulk store, and its stage is reloaded once that store has read it.
template <int S>
__global__ void bulk_copy(const char* __restrict__ src, char* __restrict__ dst, int64_t nchunks, int chunk,
                          bool contiguous) {
  extern __shared__ __align__(128) char bytes_ring[];
  __shared__ __align__(8) uint64_t full[S];
  if (threadIdx.x != 0) return;
  const uint32_t base = smem_addr(bytes_ring);
  for (int s = 0; s < S; ++s) mbar_init(smem_addr(&full[s]), 1);
  mbar_init_fence();
  const Chunks c(nchunks, contiguous);
  auto load = [&](int64_t j) {
    const int s = int(j % S);
    mbar_arrive_expect_tx(smem_addr(&full[s]), chunk);
    bulk_load(base + s * chunk, src + c[j] * chunk, chunk, smem_addr(&full[s]));
  };
  for (int64_t j = 0; j < S - 1 && j < c.count; ++j) load(j);
  for (int64_t j = 0; j < c.count; ++j) {
    const int s = int(j % S);
    mbar_wait(smem_addr(&full[s]), uint32_t(j / S) & 1);
    bulk_store(dst + c[j] * chunk, base + s * chunk, chunk);
    bulk_commit();
    if (j + S - 1 < c.count) {
      bulk_wait<1, true>();  // the store of chunk j - 1 has read stage (j - 1) % S
      load(j + S - 1);
    }
  }
  bulk_wait<0, false>();
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ void unpack(const uint4& u, float (&f)[8]) {
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __half22float2(h[i]);
    f[2 * i] = p.x, f[2 * i + 1] = p.y;
  }
}

// LayerNorm of fp16 rows of T * V vectors (weight and bias read after the reductions, from L1),
// persistent over rows blockIdx.x + j * gridDim.x. Thread 0 keeps S rows on the way by
// bulk loads into the ring; TSTORE: the outputs go through two shared row buffers and a
// bulk store, else straight from registers (STG.128).
template <int T, int V, int S, bool TSTORE>
__global__ __launch_bounds__(T) void ln_bulk(const __half* __restrict__ x, __half* __restrict__ out,
                                            const __half* __restrict__ w, const __half* __restrict__ b, int rows,
                                            float eps) {
  constexpr int NV = T * V, RB = NV * 16, W = T / 32;
  extern __shared__ __align__(128) uint4 ring[];  // S input rows, then 2 output rows
  __shared__ __align__(8) uint64_t full[S];
  __shared__ float red[2][2][W];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const uint32_t base = smem_addr(ring);
  const int count = blockIdx.x < rows ? (rows - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  auto row_of = [&](int j) { return int64_t(blockIdx.x) + int64_t(j) * gridDim.x; };
  auto load = [&](int j) {
    const int s = j % S;
    mbar_arrive_expect_tx(smem_addr(&full[s]), RB);
    bulk_load(base + s * RB, x + row_of(j) * NV * 8, RB, smem_addr(&full[s]));
  };
  if (t == 0) {
    for (int s = 0; s < S; ++s) mbar_init(smem_addr(&full[s]), 1);
    mbar_init_fence();
    for (int j = 0; j < S && j < count; ++j) load(j);
  }
  __syncthreads();
  for (int j = 0; j < count; ++j) {
    const int s = j % S, p = j & 1;
    mbar_wait(smem_addr(&full[s]), uint32_t(j / S) & 1);
    float f[V][8], sum = 0.f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      unpack(ring[s * NV + t + k * T], f[k]);
#pragma unroll
      for (int i = 0; i < 8; ++i) sum += f[k][i];
    }
    sum = warp_sum(sum);
    if (lane == 0) red[p][0][warp] = sum;
    if (TSTORE && t == 0) bulk_wait<1, true>();  // output buffer p's last store (row j - 2) has read it
    __syncthreads();  // every thread has stage s in registers
    if (t == 0 && j + S < count) load(j + S);
    float mean = 0.f;
#pragma unroll
    for (int i = 0; i < W; ++i) mean += red[p][0][i];
    mean *= 1.f / (NV * 8);
    float sq = 0.f;
#pragma unroll
    for (int k = 0; k < V; ++k)
#pragma unroll
      for (int i = 0; i < 8; ++i) sq += (f[k][i] - mean) * (f[k][i] - mean);
    sq = warp_sum(sq);
    if (lane == 0) red[p][1][warp] = sq;
    __syncthreads();
    float var = 0.f;
#pragma unroll
    for (int i = 0; i < W; ++i) var += red[p][1][i];
    const float rstd = rsqrtf(var * (1.f / (NV * 8)) + eps);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float wf[8], bf[8];
      unpack(__ldg(reinterpret_cast<const uint4*>(w) + t + k * T), wf);
      unpack(__ldg(reinterpret_cast<const uint4*>(b) + t + k * T), bf);
      uint4 o;
      __half2* h = reinterpret_cast<__half2*>(&o);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        h[i] = __floats2half2_rn((f[k][2 * i] - mean) * rstd * wf[2 * i] + bf[2 * i],
                                 (f[k][2 * i + 1] - mean) * rstd * wf[2 * i + 1] + bf[2 * i + 1]);
      if constexpr (TSTORE) ring[(S + p) * NV + t + k * T] = o;
      else reinterpret_cast<uint4*>(out + row_of(j) * NV * 8)[t + k * T] = o;
    }
    if constexpr (TSTORE) {
      fence_async_smem();
      __syncthreads();
      if (t == 0) {
        bulk_store(out + row_of(j) * NV * 8, base + (S + p) * RB, RB);
        bulk_commit();
      }
    }
  }
  if (TSTORE && t == 0) bulk_wait<0, false>();
}

// silu_and_mul_fp8 of fp16 rows [gate | up] (2 x NV vectors) into NV fp8 vectors, with
// the package's arithmetic (activation.cu): persistent over rows blockIdx.x + j *
// gridDim.x, each row's gate and up bulk-loaded S rows ahead into a ring; the fp8
// results straight from registers (8-byte STG).
__device__ __forceinline__ float silu_h(float v) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(v * -1.4426950408889634f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return v * r;
}

template <int S>
__global__ __launch_bounds__(256) void swiglu_bulk(const __half* __restrict__ x, uint8_t* __restrict__ out,
                                                  const float* __restrict__ scale, int rows, int nv) {
  extern __shared__ __align__(128) uint4 sring[];  // S stages of 2 * nv vectors
  __shared__ __align__(8) uint64_t full[S];
  const int t = threadIdx.x, rb = nv * 16;
  const uint32_t base = smem_addr(sring);
  const int count = blockIdx.x < rows ? (rows - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  auto row_of = [&](int j) { return int64_t(blockIdx.x) + int64_t(j) * gridDim.x; };
  auto load = [&](int j) {
    const int s = j % S;
    mbar_arrive_expect_tx(smem_addr(&full[s]), 2 * rb);
    bulk_load(base + s * 2 * rb, x + row_of(j) * nv * 16, 2 * rb, smem_addr(&full[s]));
  };
  if (t == 0) {
    for (int s = 0; s < S; ++s) mbar_init(smem_addr(&full[s]), 1);
    mbar_init_fence();
    for (int j = 0; j < S && j < count; ++j) load(j);
  }
  const float inv_scale = __frcp_rn(*scale);
  __syncthreads();
  for (int j = 0; j < count; ++j) {
    const int s = j % S;
    mbar_wait(smem_addr(&full[s]), uint32_t(j / S) & 1);
    uint2* o = reinterpret_cast<uint2*>(out + row_of(j) * nv * 8);
    for (int c = t; c < nv; c += blockDim.x) {
      const uint4 gv = sring[s * 2 * nv + c], uv = sring[s * 2 * nv + nv + c];
      const __half* g = reinterpret_cast<const __half*>(&gv);
      const __half* u = reinterpret_cast<const __half*>(&uv);
      uint8_t y[8];
#pragma unroll
      for (int i = 0; i < 8; i += 2) {
        float2 q;
        q.x = __half2float(__float2half(__half2float(__float2half(silu_h(__half2float(g[i])))) * __half2float(u[i]))) * inv_scale;
        q.y = __half2float(__float2half(__half2float(__float2half(silu_h(__half2float(g[i + 1])))) * __half2float(u[i + 1]))) * inv_scale;
        const __nv_fp8x2_storage_t p = __nv_cvt_float2_to_fp8x2(q, __NV_SATFINITE, __NV_E4M3);
        y[i] = uint8_t(p & 0xFF), y[i + 1] = uint8_t(p >> 8);
      }
      o[c] = *reinterpret_cast<const uint2*>(y);
    }
    __syncthreads();  // every thread is done with stage s
    if (t == 0 && j + S < count) load(j + S);
  }
}

__global__ void fill_half(__half* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    p[i] = __float2half(float(h & 0xFFFF) / 65536.f * 4.f - 1.5f);
  }
}

int g_sms = 132;

struct Buffers {
  int copies;
  int64_t bytes;
  std::vector<char*> src, dst;
  Buffers(int64_t bytes_, int copies_) : copies(copies_), bytes(bytes_), src(copies_), dst(copies_) {
    for (int i = 0; i < copies; ++i) {
      CK(cudaMalloc(&src[i], bytes));
      CK(cudaMalloc(&dst[i], bytes));
      fill_half<<<1024, 256>>>(reinterpret_cast<__half*>(src[i]), bytes / 2, 77u + i);
    }
    CK(cudaDeviceSynchronize());
  }
  ~Buffers() {
    for (int i = 0; i < copies; ++i) cudaFree(src[i]), cudaFree(dst[i]);
  }
  // dst[0] == src[0] after one launch on copy 0 (dst poisoned first)
  template <typename Launch>
  bool copied(Launch launch) {
    CK(cudaMemset(dst[0], 0xFF, bytes));
    CK(launch(0, cudaStream_t(0)));
    CK(cudaDeviceSynchronize());
    std::vector<char> a(bytes), b(bytes);
    CK(cudaMemcpy(a.data(), src[0], bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), dst[0], bytes, cudaMemcpyDeviceToHost));
    return std::memcmp(a.data(), b.data(), bytes) == 0;
  }
};

template <typename Launch>
void report(const char* kind, const char* name, Buffers& buf, bool ok, Launch launch, bool timed) {
  if (!timed) {
    std::printf("%s %-34s %s\n", kind, name, ok ? "ok" : "MISMATCH");
    return;
  }
  const float us = probe::graph_time_us(buf.copies, launch);
  std::printf("%s %-34s %8.2f us %6.2f TB/s %s\n", kind, name, us, 2.0 * buf.bytes / us * 1e-6, ok ? "ok" : "MISMATCH");
  std::fflush(stdout);
}

template <int U, int LD, int ST>
void run_vec(Buffers& buf, int threads, bool timed) {
  const int64_t n = buf.bytes / 16;
  auto launch = [&](int i, cudaStream_t st) {
    const int64_t per = int64_t(threads) * U;
    vec_copy<U, LD, ST><<<unsigned((n + per - 1) / per), threads, 0, st>>>(
        reinterpret_cast<const uint4*>(buf.src[i]), reinterpret_cast<uint4*>(buf.dst[i]), n);
    return cudaGetLastError();
  };
  char name[64];
  std::snprintf(name, sizeof name, "vec U%d T%d ld%d st%d", U, threads, LD, ST);
  report("copy", name, buf, buf.copied(launch), launch, timed);
}

template <int U>
void run_persist(Buffers& buf, int threads, int per_sm, bool timed) {
  const int64_t n = buf.bytes / 16;
  auto launch = [&](int i, cudaStream_t st) {
    vec_copy_persist<U><<<g_sms * per_sm, threads, 0, st>>>(reinterpret_cast<const uint4*>(buf.src[i]),
                                                            reinterpret_cast<uint4*>(buf.dst[i]), n);
    return cudaGetLastError();
  };
  char name[64];
  std::snprintf(name, sizeof name, "persist U%d T%d x%d/SM", U, threads, per_sm);
  report("copy", name, buf, buf.copied(launch), launch, timed);
}

template <int S>
void run_bulk(Buffers& buf, int chunk, int per_sm, bool contiguous, bool timed) {
  const int smem = S * chunk;
  if (smem > 227 * 1024) return;
  CK(cudaFuncSetAttribute(bulk_copy<S>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int fit = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, bulk_copy<S>, 32, smem));
  if (fit < per_sm) return;
  auto launch = [&](int i, cudaStream_t st) {
    bulk_copy<S><<<g_sms * per_sm, 32, smem, st>>>(buf.src[i], buf.dst[i], buf.bytes / chunk, chunk, contiguous);
    return cudaGetLastError();
  };
  char name[64];
  std::snprintf(name, sizeof name, "bulk %dK S%d x%d/SM %s", chunk / 1024, S, per_sm, contiguous ? "contig" : "inter");
  report("copy", name, buf, buf.copied(launch), launch, timed);
}

struct LnCase {
  Buffers& buf;
  int rows;
  __half *w, *b, *ref;
};

// max |ours - package| in fp16 steps-ish (absolute) over copy 0
template <typename Launch>
double ln_diff(LnCase& c, Launch launch) {
  CK(cudaMemset(c.buf.dst[0], 0xFF, c.buf.bytes));
  CK(launch(0, cudaStream_t(0)));
  CK(cudaDeviceSynchronize());
  const int64_t n = c.buf.bytes / 2;
  std::vector<__half> a(n), r(n);
  CK(cudaMemcpy(a.data(), c.buf.dst[0], c.buf.bytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r.data(), c.ref, c.buf.bytes, cudaMemcpyDeviceToHost));
  double d = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double u = __half2float(a[i]), v = __half2float(r[i]);
    d = std::isfinite(u) ? std::max(d, std::abs(u - v)) : 1e30;
  }
  return d;
}

int package_ln(LnCase& c, int i, cudaStream_t st, void* out) {
  using namespace inference_kernels;
  LayerNormParams p{DType::kFloat16, {out, 4096}, {c.buf.src[i], 4096}, c.w, c.b, c.rows, 4096, 1e-5f};
  return layer_norm_launch(p, st);
}

template <int T, int V, int S, bool TSTORE>
void run_ln(LnCase& c, int per_sm, bool timed) {
  constexpr int RB = T * V * 16;
  const int smem = (S + (TSTORE ? 2 : 0)) * RB;
  auto kern = ln_bulk<T, V, S, TSTORE>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int fit = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kern, T, smem));
  if (per_sm == 0) per_sm = fit;
  if (fit < per_sm) return;
  auto launch = [&](int i, cudaStream_t st) {
    kern<<<std::min(c.rows, g_sms * per_sm), T, smem, st>>>(reinterpret_cast<const __half*>(c.buf.src[i]),
                                                             reinterpret_cast<__half*>(c.buf.dst[i]), c.w, c.b,
                                                             c.rows, 1e-5f);
    return cudaGetLastError();
  };
  const double d = ln_diff(c, launch);
  char name[64];
  std::snprintf(name, sizeof name, "bulk T%d V%d S%d %s x%d/SM", T, V, S, TSTORE ? "tstore" : "stg", per_sm);
  report("ln", name, c.buf, d <= 2e-3, launch, timed);
  if (d > 2e-3) std::printf("   max diff against the package %g\n", d);
}

// silu_and_mul_fp8 fp16 rows x 13312 -> rows x 6656 fp8: the package's kernel and swiglu_bulk
void run_swiglu(int rows, int copies, bool timed) {
  using namespace inference_kernels;
  const int d = 6656, nv = d / 8;
  const int64_t in_bytes = int64_t(rows) * 2 * d * 2, out_bytes = int64_t(rows) * d;
  std::vector<char*> in(copies), out(copies);
  for (int i = 0; i < copies; ++i) {
    CK(cudaMalloc(&in[i], in_bytes));
    CK(cudaMalloc(&out[i], out_bytes));
    fill_half<<<1024, 256>>>(reinterpret_cast<__half*>(in[i]), in_bytes / 2, 91u + i);
  }
  float* scale;
  uint8_t* ref;
  CK(cudaMalloc(&scale, 4));
  CK(cudaMalloc(&ref, out_bytes));
  const float sc = 0.02f;
  CK(cudaMemcpy(scale, &sc, 4, cudaMemcpyHostToDevice));
  auto package = [&](int i, cudaStream_t st, void* o) {
    SiluOperands a{{o, d}, {in[i], 2 * d}, {in[i] + d * 2, 2 * d}, rows, d};
    return cudaError_t(silu_mul_launch(DType::kFloat16, DType::kFloat8E4M3, a, scale, st));
  };
  CK(package(0, 0, ref));
  CK(cudaDeviceSynchronize());
  auto same = [&](auto launch) {
    CK(cudaMemset(out[0], 0x7F, out_bytes));
    CK(launch(0, cudaStream_t(0)));
    CK(cudaDeviceSynchronize());
    std::vector<uint8_t> a(out_bytes), b(out_bytes);
    CK(cudaMemcpy(a.data(), out[0], out_bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), ref, out_bytes, cudaMemcpyDeviceToHost));
    return std::memcmp(a.data(), b.data(), out_bytes) == 0;
  };
  auto show = [&](const char* name, auto launch) {
    const bool ok = same(launch);
    if (!timed) {
      std::printf("swiglu %-34s %s\n", name, ok ? "ok" : "MISMATCH");
      return;
    }
    const float us = probe::graph_time_us(copies, launch);
    std::printf("swiglu %-34s %8.2f us %6.2f TB/s %s\n", name, us, (in_bytes + out_bytes) / us * 1e-6,
                ok ? "ok" : "MISMATCH");
    std::fflush(stdout);
  };
  std::printf("== silu_and_mul_fp8 fp16 %d x %d\n", rows, 2 * d);
  show("package silu_and_mul_fp8", [&](int i, cudaStream_t st) { return package(i, st, out[i]); });
  auto bulk = [&]<int S>(int threads, int per_sm) {
    const int smem = S * 2 * nv * 16;
    CK(cudaFuncSetAttribute(swiglu_bulk<S>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int fit = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, swiglu_bulk<S>, threads, smem));
    if (fit < per_sm) return;
    char name[64];
    std::snprintf(name, sizeof name, "bulk S%d T%d x%d/SM", S, threads, per_sm);
    show(name, [&](int i, cudaStream_t st) {
      swiglu_bulk<S><<<std::min(rows, g_sms * per_sm), threads, smem, st>>>(
          reinterpret_cast<const __half*>(in[i]), reinterpret_cast<uint8_t*>(out[i]), scale, rows, nv);
      return cudaGetLastError();
    });
  };
  for (int per_sm : {1, 2, 3, 4})
    for (int threads : {128, 256}) {
      bulk.template operator()<2>(threads, per_sm);
      bulk.template operator()<3>(threads, per_sm);
      bulk.template operator()<4>(threads, per_sm);
    }
  for (int i = 0; i < copies; ++i) cudaFree(in[i]), cudaFree(out[i]);
  cudaFree(scale), cudaFree(ref);
}

}  // namespace

int main() {
  const bool small = std::getenv("PROBE_SANITIZE") != nullptr;
  g_sms = probe::print_device();
  const bool timed = !small;
  const int copies = small ? 1 : 8;
  // copies: 33.5 MB (LayerNorm / RMSNorm 4096 x 4096 16-bit) and 67 MB each way; small: odd chunk counts
  const std::vector<int64_t> sizes = small ? std::vector<int64_t>{int64_t(37) * 32768} : std::vector<int64_t>{4096ll * 4096 * 2, 4096ll * 8192 * 2};
  for (int64_t bytes : sizes) {
    Buffers buf(bytes, copies);
    std::printf("== copy %.1f MB each way\n", bytes / 1e6);
    {
      auto launch = [&](int i, cudaStream_t st) {
        return cudaMemcpyAsync(buf.dst[i], buf.src[i], buf.bytes, cudaMemcpyDeviceToDevice, st);
      };
      report("copy", "cudaMemcpyAsync", buf, buf.copied(launch), launch, timed);
    }
    for (int threads : {128, 256, 512}) {
      run_vec<1, 0, 0>(buf, threads, timed);
      run_vec<2, 0, 0>(buf, threads, timed);
      run_vec<4, 0, 0>(buf, threads, timed);
      run_vec<8, 0, 0>(buf, threads, timed);
    }
    run_vec<4, 1, 0>(buf, 256, timed);
    run_vec<4, 0, 1>(buf, 256, timed);
    run_vec<4, 1, 1>(buf, 256, timed);
    run_vec<4, 2, 0>(buf, 256, timed);
    run_vec<4, 2, 1>(buf, 256, timed);
    for (int per_sm : {2, 4, 8}) {
      run_persist<2>(buf, 256, per_sm, timed);
      run_persist<4>(buf, 256, per_sm, timed);
    }
    for (bool contiguous : {false, true})
      for (int chunk : {4096, 8192, 16384, 32768})
        for (int per_sm : {1, 2, 4, 8}) {
          run_bulk<2>(buf, chunk, per_sm, contiguous, timed);
          run_bulk<4>(buf, chunk, per_sm, contiguous, timed);
          run_bulk<8>(buf, chunk, per_sm, contiguous, timed);
        }
  }
  {
    const int rows = small ? 37 : 4096;
    Buffers buf(int64_t(rows) * 4096 * 2, copies);
    LnCase c{buf, rows, nullptr, nullptr, nullptr};
    CK(cudaMalloc(&c.w, 8192));
    CK(cudaMalloc(&c.b, 8192));
    CK(cudaMalloc(&c.ref, buf.bytes));
    fill_half<<<16, 256>>>(c.w, 4096, 5u), fill_half<<<16, 256>>>(c.b, 4096, 6u);
    CK(cudaDeviceSynchronize());
    CK(cudaError_t(package_ln(c, 0, 0, c.ref)));
    CK(cudaDeviceSynchronize());
    std::printf("== layer_norm fp16 %d x 4096, weight and bias\n", rows);
    {
      auto launch = [&](int i, cudaStream_t st) { return cudaError_t(package_ln(c, i, st, buf.dst[i])); };
      report("ln", "package layer_norm", buf, ln_diff(c, launch) == 0, launch, timed);
    }
    for (int per_sm : {0, 2, 4, 6, 8}) {
      run_ln<128, 4, 2, false>(c, per_sm, timed);
      run_ln<128, 4, 2, true>(c, per_sm, timed);
      run_ln<128, 4, 3, false>(c, per_sm, timed);
      run_ln<128, 4, 3, true>(c, per_sm, timed);
      run_ln<256, 2, 2, false>(c, per_sm, timed);
      run_ln<256, 2, 2, true>(c, per_sm, timed);
      run_ln<256, 2, 4, true>(c, per_sm, timed);
      run_ln<512, 1, 2, true>(c, per_sm, timed);
    }
    cudaFree(c.w), cudaFree(c.b), cudaFree(c.ref);
  }
  if (small) {
    run_swiglu(37, 1, false);
  } else {
    run_swiglu(512, 8, true);
    run_swiglu(2048, 8, true);
  }
  return 0;
}
