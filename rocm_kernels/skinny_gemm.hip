// FP8 GEMM for decode batch sizes on AMD CDNA GPUs (gfx942 MI300X, gfx90a MI200):
//   out[m, n] = sum_k a[m, k] * b[n, k] * scale_a * scale_b[n or 0] (+ bias[n]),
// a [M, K] and b [N, K] float8_e4m3fnuz (ROCm's fp8), products summed in fp32. Torch-free:
// cuda_kernels/skinny_gemm_torch.cpp checks the tensors, allocates the workspace and
// calls the launcher below.
//
// Why this shape of kernel: at M <= 32 the product is memory bound; the weight (N*K
// bytes) is read once and the work is to keep enough of it in flight on every CU.
//
// - Persistent grid, work items: one block per CU walks work items (a tile of 16 * NW
//   weight rows and 32 activation rows, times one of `splits` K ranges;
//   skinny_gemm_plan.h). With one block per output tile a small N leaves CUs idle
//   (N = 2304 is 144 tiles for MI300X's 304 CUs); split into 288 items, every CU but 16
//   streams. The split is chosen by counting rounds of items over the CUs, each item
//   charged a guessed fixed cost (filling the ring, the partials' round trip): untuned.
// - Producer and consumer waves: 8 producer waves only load, 4 consumer waves only run
//   MFMAs. Producer p owns chunk p of each 8-chunk step and keeps 4 steps of loads in
//   flight in its registers (memory-level parallelism that does not depend on the MFMA
//   waves' registers or stalls), then writes each into a 2-slot LDS ring; consumer c
//   reads chunks c and c + 4 of the step from the other slot. One s_barrier per step is
//   the queue's only synchronisation: it cannot deadlock or lose a slot, which wave-level
//   flags polled in LDS could, and no one has run this kernel. __syncthreads waits for LDS
//   (lgkmcnt) only, so the producers' global loads stay in flight across it; the loop is
//   shaped so the compiler's vmcnt waits leave 3 steps in flight (test_rocm_isa.py
//   checks them). The activation goes through the ring too (it is 1/NW of the bytes and
//   mostly L2 hits), so consumers never wait on global memory.
// - Lane mapping: per 64-byte chunk, lane (r = lane % 16, g = lane / 16) loads 16 bytes
//   at byte 16g of weight row r of each n-tile and of activation row r of each 16-row
//   m-tile (M padded to the MFMA's 16): one global_load_dwordx4 each, a wave moving 1 KB
//   (a "piece"), which it writes to LDS at lane * 16 and the consumer lane of the same
//   number reads back (ds_write_b128 / ds_read_b128, conflict-free). The weight is the
//   MFMA's B operand (columns n), the activation its A operand (rows m); in both, lane
//   (r, g) feeds k-slots starting at 8g (fp8, K = 32) or 4g (f16, K = 16) of its row, so
//   handing the MFMAs consecutive pieces of the 16 bytes maps every byte of the chunk to
//   one k-slot, identically for A and B: a permutation of K that leaves each dot product
//   unchanged, with no shuffles.
// - gfx942: v_mfma_f32_16x16x32_fp8_fp8 takes the fnuz bytes as they are (MI300's fp8 is
//   fnuz), two per chunk and tile pair. gfx90a has no fp8: each fnuz pair becomes an f16
//   pair by integer operations (value / 128, exact, common/fp8.h), one packed multiply by
//   128 makes it the exact value (and every fp8 subnormal an f16 normal), and
//   v_mfma_f32_16x16x16f16 runs four per chunk. The NaN 0x80 is restored on a rare
//   branch, so it propagates as on the CPU.
// - Split-K, deterministic: the consumers' partials meet in LDS and are added in consumer
//   order. With one split that sum is scaled and stored. Otherwise each item writes it to
//   its own fp32 slot of the workspace, and the block whose device-scope increment of the
//   tile's arrival counter comes last (release fence before, acquire after) adds the
//   tile's slots in split order and stores, then resets the counter. The result does not
//   depend on which block ran what or who arrived last, so it is bitwise repeatable and
//   the CPU twin (tests/test_skinny_gemm_fnuz.py) follows the same order; atomicAdd into
//   a zeroed output would add the partials in arrival order (and round them to fp16 each
//   time). No block ever waits for another: no co-residency assumption, capturable in a
//   graph. The counters come from torch's caching allocator, which does not zero, so the
//   launcher clears them with a stream-ordered memset (a graph memset node); the reset
//   keeps them zero between launches anyway. `splits` depends on the CU count, so results
//   are repeatable per device type, not across MI300X and MI210.
// - Tails: rows past N and activation rows past M are clamped to the last real row (valid
//   memory; their outputs are never stored). K % 64 != 0 leaves a last chunk whose
//   segments past K are loaded from the row's last 16 bytes and zeroed by the consumer
//   (+0 in fnuz; zeroing both operands keeps a stray NaN byte out). Producers load in
//   every step, even past their item (the item's last chunk again, a cache hit): a load
//   skipped on some path makes the compiler's waits drain all loads in flight. Chunks
//   past an item are never multiplied. Rows not 16-byte aligned, or K % 16 != 0, take a
//   byte kernel (a wave per weight row): correct for any layout, not fast.
// - Not done: prefetching the next item's first steps during this item's epilogue (each
//   item pays one memory latency to fill the ring, which is why the plan weighs items);
//   sparse MFMA for M <= 8.
//
// Checked, never run: no AMD GPU here. tests/test_rocm_isa.py reads this file's assembly.
#include <hip/hip_runtime.h>

#include <algorithm>
#include <cstdint>

#include "block_reduce_hip.h"
#include "fp8.h"
#include "gpu_launchers.h"
#include "skinny_gemm_plan.h"
#include "vec_io_hip.h"

#if defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define IK_MFMA_FP8 1
#elif defined(__gfx90a__)
#define IK_MFMA_F16 1
#endif

namespace {

using inference_kernels::DType;
using inference_kernels::SkinnyGemmParams;
using namespace inference_kernels::rocm;
using namespace inference_kernels::rocm_gemm;

constexpr int kThreads = (kProducers + kConsumers) * kWave;  // 768: 3 waves per SIMD
constexpr int kPiece = 16 * kWave;  // bytes one wave moves with one 16-byte load per lane

typedef uint32_t U32x4 __attribute__((ext_vector_type(4)));
typedef long I64x2 __attribute__((ext_vector_type(2)));
typedef float F32x4 __attribute__((ext_vector_type(4)));
typedef _Float16 F16x2 __attribute__((ext_vector_type(2)));
typedef _Float16 F16x4 __attribute__((ext_vector_type(4)));

#if defined(IK_MFMA_F16)
// 16 fnuz bytes as 16 exact f16 values, four MFMA operands: h[q] holds bytes 4q .. 4q + 3.
struct F16x16 {
  F16x4 h[4];
};

__device__ __forceinline__ F16x16 to_f16(const U32x4& v) {
  uint32_t f[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = inference_kernels::fp8_fnuz_x2_to_f16x2_div128(v[i]);
    f[2 * i + 1] = inference_kernels::fp8_fnuz_x2_to_f16x2_div128(v[i] >> 16);
  }
  const uint32_t nan = inference_kernels::fp8_fnuz_x4_nan_bits(v[0]) |
                       inference_kernels::fp8_fnuz_x4_nan_bits(v[1]) |
                       inference_kernels::fp8_fnuz_x4_nan_bits(v[2]) |
                       inference_kernels::fp8_fnuz_x4_nan_bits(v[3]);
  if (__builtin_expect(nan != 0, 0)) {
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = inference_kernels::fp8_fnuz_f16x2_restore_nan(f[j]);
  }
  F16x16 r;
  const F16x2 k128 = {_Float16(128.0f), _Float16(128.0f)};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const F16x2 lo = __builtin_bit_cast(F16x2, f[2 * q]) * k128;
    const F16x2 hi = __builtin_bit_cast(F16x2, f[2 * q + 1]) * k128;
    r.h[q] = F16x4{lo[0], lo[1], hi[0], hi[1]};
  }
  return r;
}
#endif

// acc[nw][mt] (D = A B: rows m of the activation, columns n of the weight) += one chunk.
template <int NW, int MT>
__device__ __forceinline__ void mfma_chunk(F32x4 (&acc)[NW][MT], const U32x4 (&w)[NW],
                                           const U32x4 (&x)[MT]) {
#if defined(IK_MFMA_FP8)
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // bytes 8h .. 8h + 7 of each lane's 16
#pragma unroll
    for (int nw = 0; nw < NW; ++nw) {
      const long wb = __builtin_bit_cast(I64x2, w[nw])[h];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const long xb = __builtin_bit_cast(I64x2, x[mt])[h];
        acc[nw][mt] = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(xb, wb, acc[nw][mt], 0, 0, 0);
      }
    }
  }
#elif defined(IK_MFMA_F16)
  F16x16 xf[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) xf[mt] = to_f16(x[mt]);
#pragma unroll
  for (int nw = 0; nw < NW; ++nw) {
    const F16x16 wf = to_f16(w[nw]);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        acc[nw][mt] = __builtin_amdgcn_mfma_f32_16x16x16f16(xf[mt].h[q], wf.h[q], acc[nw][mt], 0, 0, 0);
      }
    }
  }
#else
  // The host pass and archs without MFMA: the launcher never runs this kernel there.
  (void)acc;
  (void)w;
  (void)x;
#endif
}

struct Work {
  Plan plan;
  float* slots;        // plan.items x (NW * MT * 256) fp32 partials (splits > 1)
  unsigned* arrivals;  // plan.tiles counters, zero at launch (splits > 1)
};

// One block per CU (768 threads, 3 waves per SIMD: up to 168 VGPRs + AGPRs a wave).
template <typename OutT, int NW, int MT>
__global__ void __launch_bounds__(kThreads) skinny_gemm_kernel(SkinnyGemmParams p, Work wk) {
  constexpr int Q = NW + MT;     // pieces per chunk: NW weight, then MT activation
  constexpr int E = NW * MT * 4;  // accumulator registers per lane
  constexpr int kRing = 2 * kStep * Q * kPiece;
  constexpr int kPartials = kConsumers * E * kWave * int(sizeof(float));
  // After an item's last step the ring is free: the partials and the last-arrival flag
  // reuse it (NW = MT = 2 fills all 64 KB with the ring alone).
  static_assert(kPartials + 16 <= kRing, "LDS layout");
  __shared__ __attribute__((aligned(16))) uint8_t lds[kRing];
  float* partials = reinterpret_cast<float*>(lds);
  unsigned* last = reinterpret_cast<unsigned*>(lds + kPartials);

  const int lane = threadIdx.x % kWave;
  // Wave-uniform in a scalar register: the role branches are scalar branches.
  const int wave = __builtin_amdgcn_readfirstlane(int(threadIdx.x / kWave));
  const bool producer = wave < kProducers;
  const int cw = wave - kProducers;  // consumer index
  const int r = lane % 16, g = lane / 16;
  const int64_t M = p.M, N = p.N, K = p.K;
  const auto* b = static_cast<const uint8_t*>(p.b);
  const auto* a = static_cast<const uint8_t*>(p.a);
  const Plan& plan = wk.plan;
  const float sa = *p.scale_a;

  // Output j of a tile (E * 64 of them): register e = j / 64 = (nw * MT + mt) * 4 + i of
  // lane l = j % 64 holds D row 4 (l / 16) + i (activation row) and column l % 16 (weight
  // row) of tile (nw, mt).
  auto store = [&](const Item& w, int j, float sum) {
    const int e = j / kWave, l = j % kWave;
    const int nw = e / (MT * 4), mt = (e / 4) % MT, i = e % 4;
    const int64_t n = w.n0 + nw * 16 + l % 16;
    const int64_t m = w.m0 + mt * 16 + 4 * (l / 16) + i;
    if (n >= N || m >= M) return;
    float y = sum * (sa * p.scale_b[p.scale_b_per_channel ? n : 0]);
    if (p.bias) y += to_float(static_cast<const OutT*>(p.bias)[n]);
    static_cast<OutT*>(p.out)[m * p.ldo + n] = from_float<OutT>(y);
  };

  for (int item = blockIdx.x; item < plan.items; item += gridDim.x) {
    const Item w = item_work(plan, item);
    const int steps = item_steps(w);

    // Producer rows: NW weight rows, then MT activation rows (clamped to real rows).
    const uint8_t* src[Q];
#pragma unroll
    for (int nw = 0; nw < NW; ++nw) src[nw] = b + std::min(w.n0 + nw * 16 + r, N - 1) * p.ldb + 16 * g;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) src[NW + mt] = a + std::min(w.m0 + mt * 16 + r, M - 1) * p.lda + 16 * g;

    // Step k of this producer lives in buf[k % kDepth] from its load to its LDS write.
    // Every lane loads in every step, whatever the chunk: one past the item reads the
    // item's last chunk again (a cache hit), a segment past K the row's last 16 bytes
    // (K % 16 == 0 here; the consumers zero it). No branch around a load and nothing
    // between a load and its write, so every path through the loop has the same loads in
    // flight and the compiler's waits count exactly: at a write, only that step's loads
    // (a path with fewer in flight, or a select on the data, made it drain them all).
    U32x4 buf[kDepth][Q];
    auto load_step = [&](U32x4(&dst)[Q], int s) {
      const int64_t c = std::min(producer_chunk(w, s, wave), w.c1 - 1);
      const int64_t off = std::min(c * kChunk + 16 * g, K - 16) - 16 * g;
#pragma unroll
      for (int q = 0; q < NW; ++q) dst[q] = __builtin_nontemporal_load(reinterpret_cast<const U32x4*>(src[q] + off));
#pragma unroll
      for (int q = NW; q < Q; ++q) dst[q] = *reinterpret_cast<const U32x4*>(src[q] + off);
    };
    // Chunks past the item are written too (whatever they hold) and never read.
    auto write_step = [&](const U32x4(&v)[Q], int s) {
      uint8_t* dst = lds + (ring_slot(s) * kStep + wave) * Q * kPiece + lane * 16;
#pragma unroll
      for (int q = 0; q < Q; ++q) *reinterpret_cast<U32x4*>(dst + q * kPiece) = v[q];
    };

    F32x4 acc[NW][MT];
#pragma unroll
    for (int nw = 0; nw < NW; ++nw) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) acc[nw][mt] = F32x4{0.0f, 0.0f, 0.0f, 0.0f};
    }
    auto consume = [&](int s) {
#pragma unroll
      for (int j = 0; j < kStep / kConsumers; ++j) {
        const int jc = cw + j * kConsumers;
        if (consumer_chunk(w, s, cw, j) >= w.c1) return;
        const uint8_t* at = lds + (ring_slot(s) * kStep + jc) * Q * kPiece + lane * 16;
        U32x4 wv[NW], xv[MT];
#pragma unroll
        for (int q = 0; q < NW; ++q) wv[q] = *reinterpret_cast<const U32x4*>(at + q * kPiece);
#pragma unroll
        for (int q = 0; q < MT; ++q) xv[q] = *reinterpret_cast<const U32x4*>(at + (NW + q) * kPiece);
        const int64_t c = consumer_chunk(w, s, cw, j);
        if (c * kChunk + kChunk > K && c * kChunk + 16 * g >= K) {  // the segment lies past K
#pragma unroll
          for (int q = 0; q < NW; ++q) wv[q] = U32x4{0u, 0u, 0u, 0u};
#pragma unroll
          for (int q = 0; q < MT; ++q) xv[q] = U32x4{0u, 0u, 0u, 0u};
        }
        mfma_chunk<NW, MT>(acc, wv, xv);
      }
    };

    // The roles run separate loops with the same barriers (s_barrier counts waves, and
    // the role is a scalar branch). Inside the producers' loop every path issues the same
    // loads; had the consumers' path (no loads) joined it, the compiler would count
    // their loads in flight as fewer and wait for all of them at each write.
    // Step s: consumers read slot s & 1 while producers fill slot (s + 1) & 1 with step
    // s + 1 and load step s + 1 + kDepth into the registers that freed; one barrier.
    if (producer && steps == 0) {
      __syncthreads();
    } else if (producer) {
      // In issue order (a wait for step k then covers only older loads).
#pragma unroll
      for (int d = 0; d < kDepth; ++d) {
        load_step(buf[d], d);
        __builtin_amdgcn_sched_barrier(0);
      }
      write_step(buf[0], 0);
      load_step(buf[0], kDepth);
      __syncthreads();
      // Step s: write step s + 1 from buf[(s + 1) % kDepth] (past the last step, into a
      // slot no one reads: no branch), reload those registers with step s + 1 + kDepth.
      auto step = [&](int s, U32x4(&v)[Q]) {
        write_step(v, s + 1);
        load_step(v, s + 1 + kDepth);
        __syncthreads();
      };
      // Whole groups of kDepth steps, then the rest: a `break` out of the unrolled group
      // would join the loop's back edge with fewer loads in flight.
      int s0 = 0;
      for (; s0 + kDepth <= steps; s0 += kDepth) {
#pragma unroll
        for (int u = 0; u < kDepth; ++u) step(s0 + u, buf[(u + 1) % kDepth]);
      }
#pragma unroll
      for (int u = 0; u < kDepth - 1; ++u) {
        if (s0 + u < steps) step(s0 + u, buf[(u + 1) % kDepth]);
      }
    } else {
      __syncthreads();
      for (int s = 0; s < steps; ++s) {
        consume(s);
        __syncthreads();
      }
    }

    // The ring is free (every read of it came before the last barrier).
    if (!producer) {
      float* mine = partials + cw * E * kWave;
#pragma unroll
      for (int nw = 0; nw < NW; ++nw) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int i = 0; i < 4; ++i) mine[((nw * MT + mt) * 4 + i) * kWave + lane] = acc[nw][mt][i];
        }
      }
    }
    __syncthreads();
    float* slot = plan.splits > 1 ? wk.slots + int64_t(item) * E * kWave : nullptr;
    for (int j = threadIdx.x; j < E * kWave; j += kThreads) {
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < kConsumers; ++c) sum += partials[c * E * kWave + j];
      if (slot) {
        slot[j] = sum;
      } else {
        store(w, j, sum);
      }
    }
    if (slot) {
      __threadfence();  // release: this item's slot before its arrival
      __syncthreads();
      if (threadIdx.x == 0) {
        const unsigned before = __hip_atomic_fetch_add(&wk.arrivals[w.tile], 1u, __ATOMIC_RELAXED,
                                                       __HIP_MEMORY_SCOPE_AGENT);
        *last = before == unsigned(plan.splits - 1);
      }
      __syncthreads();
      if (*last) {
        __threadfence();  // acquire: the other items' slots
        const float* tile_slots = wk.slots + int64_t(w.tile) * plan.splits * E * kWave;
        for (int j = threadIdx.x; j < E * kWave; j += kThreads) {
          // 8 slots loaded at once, then added in split order (a missing slot adds +0,
          // which changes no sum: sum starts at +0 and never becomes -0).
          float sum = 0.0f;
          for (int s0 = 0; s0 < plan.splits; s0 += 8) {
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) v[u] = s0 + u < plan.splits ? tile_slots[(s0 + u) * E * kWave + j] : 0.0f;
#pragma unroll
            for (int u = 0; u < 8; ++u) sum += v[u];
          }
          store(w, j, sum);
        }
        if (threadIdx.x == 0) {
          __hip_atomic_store(&wk.arrivals[w.tile], 0u, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
        }
      }
    }
    __syncthreads();  // the partials and the flag alias the ring the next item fills
  }
}

// Any layout (rows not 16-byte aligned, K % 16 != 0): a wave per weight row, lanes
// striding K with byte loads, fp32 sums reduced over the 64 lanes. Correct, not fast.
template <typename OutT>
__global__ void __launch_bounds__(256) skinny_gemm_bytes_kernel(SkinnyGemmParams p) {
  const int lane = threadIdx.x % kWave;
  const int64_t n = int64_t(blockIdx.x) * (blockDim.x / kWave) + threadIdx.x / kWave;
  if (n >= p.N) return;
  const auto* b = static_cast<const uint8_t*>(p.b) + n * p.ldb;
  const float scale = *p.scale_a * p.scale_b[p.scale_b_per_channel ? n : 0];
  const float bias = p.bias ? to_float(static_cast<const OutT*>(p.bias)[n]) : 0.0f;
  for (int64_t m = blockIdx.y; m < p.M; m += gridDim.y) {
    const auto* a = static_cast<const uint8_t*>(p.a) + m * p.lda;
    float sum = 0.0f;
    for (int64_t k = lane; k < p.K; k += kWave) {
      sum += inference_kernels::fp8_fnuz_to_float(a[k]) * inference_kernels::fp8_fnuz_to_float(b[k]);
    }
    sum = wave_reduce<inference_kernels::Sum>(sum);
    if (lane == 0) static_cast<OutT*>(p.out)[m * p.ldo + n] = from_float<OutT>(sum * scale + bias);
  }
}

int cu_count() {
  static int counts[64] = {};
  int dev = 0;
  if (hipGetDevice(&dev) != hipSuccess || dev < 0 || dev >= 64) return 304;
  if (!counts[dev]) {
    int n = 0;
    if (hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, dev) != hipSuccess) n = 0;
    counts[dev] = n > 0 ? n : 304;
  }
  return counts[dev];
}

Plan plan_for(const SkinnyGemmParams& p) {
  return make_plan(p.M, p.N, p.K, cu_count(), p.tiles_per_block, p.warps_per_tile);
}

bool vector_path(const SkinnyGemmParams& p) {
  return p.K % 16 == 0 && p.lda % 16 == 0 && p.ldb % 16 == 0 && aligned(p.a, 16) && aligned(p.b, 16);
}

template <typename OutT, int NW, int MT>
int launch(const SkinnyGemmParams& p, const Plan& plan, hipStream_t stream) {
  if (!plan.fits) return hipErrorInvalidConfiguration;
  Work wk{plan, nullptr, nullptr};
  if (plan.splits > 1) {
    if (!p.workspace || !aligned(p.workspace, 16)) return hipErrorInvalidValue;
    wk.slots = static_cast<float*>(p.workspace);
    wk.arrivals = reinterpret_cast<unsigned*>(static_cast<uint8_t*>(p.workspace) + int64_t(plan.items) * NW * MT * 1024);
    const hipError_t err = hipMemsetAsync(wk.arrivals, 0, size_t(plan.tiles) * 4, stream);
    if (err != hipSuccess) return err;
  }
  skinny_gemm_kernel<OutT, NW, MT><<<unsigned(plan.grid), kThreads, 0, stream>>>(p, wk);
  return hipSuccess;
}

template <typename OutT>
int launch_out(const SkinnyGemmParams& p, hipStream_t stream) {
  if (!vector_path(p)) {
    constexpr int kWaves = 4;
    const int64_t blocks = (p.N + kWaves - 1) / kWaves;
    if (blocks > INT32_MAX) return hipErrorInvalidConfiguration;
    const dim3 grid(unsigned(blocks), unsigned(std::min<int64_t>(p.M, 65535)));
    skinny_gemm_bytes_kernel<OutT><<<grid, kWaves * kWave, 0, stream>>>(p);
    return hipSuccess;
  }
  // m-tiles of 16 activation rows: M 1-16 one, 17-32 (and M > 32, in slices of 32) two.
  const Plan plan = plan_for(p);
  if (plan.mt == 2) {
    return plan.nw == 2 ? launch<OutT, 2, 2>(p, plan, stream) : launch<OutT, 1, 2>(p, plan, stream);
  }
  return plan.nw == 2 ? launch<OutT, 2, 1>(p, plan, stream) : launch<OutT, 1, 1>(p, plan, stream);
}

}  // namespace

namespace inference_kernels {

// The split-K partials and the tiles' arrival counters (skinny_gemm_plan.h), when the
// plan splits K across work items; 0 otherwise and on the byte path.
int64_t skinny_gemm_fp8_workspace_bytes(const SkinnyGemmParams& p) {
  if (p.M <= 0 || p.N <= 0 || !vector_path(p)) return 0;
  return plan_for(p).workspace;
}

// config: tiles_per_block = n-tiles of 16 rows per work item (1 or 2), warps_per_tile =
// K splits per tile across work items (1 .. 32, at most one per 64-byte chunk); CUDA's
// cluster and convert mean nothing here and are ignored.
int skinny_gemm_fp8_launch(const SkinnyGemmParams& p, void* stream) {
  if (p.M <= 0 || p.N <= 0) return hipSuccess;
  const auto s = static_cast<hipStream_t>(stream);
  int err = hipErrorInvalidValue;
  switch (p.out_dtype) {
    case DType::kBFloat16: err = launch_out<BFloat16>(p, s); break;
    case DType::kFloat16: err = launch_out<Half>(p, s); break;
    default: break;
  }
  return err != hipSuccess ? err : hipGetLastError();
}

}  // namespace inference_kernels
