// EXPERIMENT (issue 4, not part of the package): the skinny FP8 GEMM with the weight as
// wgmma's shared-memory operand, fed by the tensor memory accelerator (TMA) from a
// producer warp: the design cuBLAS-class kernels use. First run in the twenty-fifth
// session (s25a: at M = 32 56.31 us at 13312 x 16384 against cuBLASLt's 55.50; BENCHMARKS.md);
// its c2p2s4 variant became the package's convert 6 (cuda_kernels/skinny_gemm.cu). Since
// then it takes its TMA, mbarrier and wgmma wrappers from the package (cuda_kernels/tma.cuh);
// s25a ran the form of commit 7536699, with its own copies of them.
//
// Why: at M = 32 the package's wgmma kernels (convert 4 / 5) trail torch._scaled_mm by
// 10-30% (BENCHMARKS.md, twenty-third session). They hold the weight as the register
// operand, one row a lane, so each m64 MMA covers 32 distinct rows and the activation is
// duplicated in B (half of every MMA is padding), and every 16 weight bytes cost a load
// instruction in the consuming warps. The eighteenth session's staged form (branch
// wg-staged: the weight in shared memory, 128-byte swizzle, a cp.async producer warp,
// each block's whole K share of the activation copied before its first MMA, partials
// through distributed shared memory) reached 0.75-0.99x of the default, so the padding was
// not the limit. What differs here, and is what cuBLAS's kernels do (Nsight Compute, s18e:
// nvjet_sm90_qqtst_128x8_128x12_2x1: 128 blocks of 384 threads, 12 stages of 128 K
// bytes): one thread issues bulk tensor copies (TMA) of [64 C rows x 128 bytes] panels, so
// no warp spends instructions on loads; the activation streams with the weight, a panel a
// stage; rings up to 16 stages deep. C consumer warpgroups each run m64nNNk32 MMAs on 64
// distinct rows, both operands in shared memory (K-major, 128-byte swizzle), and release
// the stage through an mbarrier. Predicted: the weight stream limited by HBM alone, as
// cuBLAS's (about 92% of the copy bandwidth at 13312 x 16384, M = 32).
//
// D^T = W X^T, W [N, K] e4m3 and X [M, K] e4m3 row-major (K-major, what wgmma's fp8 form
// requires of both operands). Tails: TMA fills rows past N or M and bytes past K with
// zeros, so any N, M <= 32 and K % 16 == 0 (the tensor map's stride rule) work. Blocks
// split K and add fp32 partials with red.global.add into a zeroed output, as
// wgmma_probe.cu does (no bf16 epilogue); the fp8 MMAs' sums move into fp32 registers
// once a stage (the fp8 accumulator keeps fewer bits than fp32, wgmma.cuh).
//
// nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Xptxas -v benchmarks/tma_probe.cu -o /tmp/tma_probe
// /tmp/tma_probe       correctness at odd sizes, then timing at issue 4's shapes (PROBE_SHAPES,
//                      PROBE_SPLITS as in wgmma_probe.cu; PROBE_MS=1,8,16,32 the rows timed;
//                      PROBE_SANITIZE=1: a few small checks only, for compute-sanitizer)
#include <cuda.h>  // CUtensorMap and the encoder's types; the entry point is fetched at run time
#include <cudaTypedefs.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../cuda_kernels/tma.cuh"  // the package's TMA, mbarrier and wgmma wrappers
#include "probe_util.cuh"

namespace {

using namespace inference_kernels::cuda;

constexpr int kPanel = 128;  // K bytes a panel: one 128-byte swizzle row, 4 MMAs of k = 32

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The box of `map` (tma.cuh's tma_load_2d) under the L2 cache policy `policy`.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar,
                                         uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "l"(policy)
      : "memory");
}
// An L2 policy that evicts these lines first: the weight is read once, so it should not
// push the activation (read by every block) out of L2.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

// d (+)= A (64 x 32 at da) * B (32 x NN at db), both shared memory; acc == 0: d not read.
#define TP_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define TP_PRED "{\n .reg .pred p;\n setp.ne.b32 p, %"
template <int NN>
__device__ __forceinline__ void wgmma_ss(float (&d)[NN / 2], uint64_t da, uint64_t db, int acc) {
  static_assert(NN == 8 || NN == 16 || NN == 24 || NN == 32, "n = 8, 16, 24 or 32");
  if constexpr (NN == 8) {
    asm volatile(TP_PRED "6, 0;\n wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
                 "{%0,%1,%2,%3}, %4, %5, p, 1, 1;\n}\n"
                 : TP_D4(0)
                 : "l"(da), "l"(db), "r"(acc)
                 : "memory");
  } else if constexpr (NN == 16) {
    asm volatile(TP_PRED "10, 0;\n wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1;\n}\n"
                 : TP_D4(0), TP_D4(4)
                 : "l"(da), "l"(db), "r"(acc)
                 : "memory");
  } else if constexpr (NN == 24) {
    asm volatile(TP_PRED "14, 0;\n wgmma.mma_async.sync.aligned.m64n24k32.f32.e4m3.e4m3 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11}, %12, %13, p, 1, 1;\n}\n"
                 : TP_D4(0), TP_D4(4), TP_D4(8)
                 : "l"(da), "l"(db), "r"(acc)
                 : "memory");
  } else {
    asm volatile(TP_PRED "18, 0;\n wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1;\n}\n"
                 : TP_D4(0), TP_D4(4), TP_D4(8), TP_D4(12)
                 : "l"(da), "l"(db), "r"(acc)
                 : "memory");
  }
}
#undef TP_D4
#undef TP_PRED

// C consumer warpgroups of 64 weight rows (block rows 64 C <= 256: a tensor map's box), P
// panels a stage, S stages, wgmma n = NN >= M. Warpgroup 0 is the producer (one thread).
template <int C, int P, int S>
struct Shape {
  static constexpr int kRows = 64 * C;
  template <int NN>
  __host__ __device__ static constexpr int stage_bytes() {
    return (kRows + NN) * kPanel * P;
  }
  template <int NN>
  __host__ __device__ static constexpr int smem_bytes() {
    return S * stage_bytes<NN>() + 2 * S * 8 + 1024;  // + the barriers, + alignment slack
  }
};

struct Args {
  float* out;  // [M, N] fp32, zeroed; partials are added
  int n, m, k;
  int pps;  // panels a split
  float scale;
};

// EF: the weight's copies under an evict-first L2 policy.
template <int C, int P, int S, int NN, bool EF>
__global__ void __launch_bounds__(128 * (C + 1), 1)
    tma_gemm(const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap tx, Args a) {
  using Sh = Shape<C, P, S>;
  constexpr int kW = Sh::kRows * kPanel, kX = NN * kPanel;  // bytes a panel
  constexpr int kStage = Sh::template stage_bytes<NN>();
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
  const uint32_t full = base + S * kStage, empty = full + S * 8;

  const int panels = (a.k + kPanel - 1) / kPanel;
  const int p0 = blockIdx.y * a.pps;
  const int np = ::min(a.pps, panels - p0);
  const int nstages = (np + P - 1) / P;
  const int row0 = blockIdx.x * Sh::kRows;
  // Warp-uniform in the compiler's eyes too (else ptxas serialises the MMAs: C7520).
  const int wg = __shfl_sync(0xFFFFFFFFu, int(threadIdx.x / 128), 0);

  mbar_ring_init(full, empty, S, 4 * C);  // empty: lane 0 of every consumer warp

  if (wg == 0) {
    if (threadIdx.x == 0) {
      [[maybe_unused]] const uint64_t policy = EF ? evict_first_policy() : 0;
      for (int i = 0; i < nstages; ++i) {
        const int slot = i % S;
        if (i >= S) mbar_wait(empty + 8 * slot, ((i / S) + 1) & 1);
        // Always P panels: a split's panels are a multiple of P (the host rounds), so only
        // the last split's last stage runs past K, where the copies read zeros.
        mbar_arrive_expect_tx(full + 8 * slot, P * (kW + kX));
        const uint32_t st = base + slot * kStage;
#pragma unroll
        for (int p = 0; p < P; ++p) {
          const int kc = (p0 + i * P + p) * kPanel;
          if constexpr (EF) {
            tma_load(st + p * kW, &tw, kc, row0, full + 8 * slot, policy);
          } else {
            tma_load_2d(st + p * kW, &tw, kc, row0, full + 8 * slot);
          }
          tma_load_2d(st + P * kW + p * kX, &tx, kc, 0, full + 8 * slot);
        }
      }
    }
    return;
  }

  const int c = wg - 1;
  float acc[NN / 2], d[NN / 2];
#pragma unroll
  for (int j = 0; j < NN / 2; ++j) acc[j] = 0.f, d[j] = 0.f;
  for (int i = 0; i < nstages; ++i) {
    const int slot = i % S;
    mbar_wait(full + 8 * slot, (i / S) & 1);
    const uint32_t st = base + slot * kStage;
    wgmma_fence();
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const uint32_t wa = st + p * kW + c * 64 * kPanel, xa = st + P * kW + p * kX;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_ss<NN>(d, desc_sw128(wa + 32 * kk), desc_sw128(xa + 32 * kk), p | kk);
    }
    wgmma_commit();
    wgmma_wait_all();
    if ((threadIdx.x & 31) == 0) mbar_arrive(empty + 8 * slot);
#pragma unroll
    for (int j = 0; j < NN / 2; ++j) acc[j] += d[j];
  }
  if (nstages == 0) return;
  // d[4j + e]: weight row 16 w + g + 8 (e / 2) of this warpgroup's 64, activation row 8 j + 2 t + e % 2
  const int lane = threadIdx.x & 31, w = (threadIdx.x / 32) & 3, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < NN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = row0 + 64 * c + 16 * w + g + 8 * (e / 2), mm = 8 * j + 2 * t + (e % 2);
      if (r < a.n && mm < a.m) atomicAdd(a.out + int64_t(mm) * a.n + r, acc[4 * j + e] * a.scale);
    }
}

// A [rows, k] row-major e4m3 matrix as a tensor map of [box_rows x 128 bytes] boxes
// (tma.cuh's tensor_map_2d); exits if the driver refuses.
CUtensorMap tensor_map(const uint8_t* p, int rows, int k, int box_rows) {
  CUtensorMap map;
  if (!tensor_map_2d(&map, p, rows, k, k, box_rows)) {
    std::printf("tensor map failed: rows %d k %d box %d\n", rows, k, box_rows);
    std::exit(1);
  }
  return map;
}

// One variant: launch(NN index) and its residency.
struct Variant {
  const char* name;
  int rows;  // weight rows a block
  int panels;  // a stage
  cudaError_t (*launch[4])(const uint8_t*, const uint8_t*, Args, int, cudaStream_t);
  int (*res[4])();
};

template <int C, int P, int S, bool EF, int NN>
cudaError_t launch(const uint8_t* w, const uint8_t* x, Args a, int splits, cudaStream_t st) {
  constexpr int smem = Shape<C, P, S>::template smem_bytes<NN>();
  auto kernel = tma_gemm<C, P, S, NN, EF>;
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess) return attr;
  const CUtensorMap tw = tensor_map(w, a.n, a.k, 64 * C), tx = tensor_map(x, a.m, a.k, NN);
  const dim3 grid((a.n + 64 * C - 1) / (64 * C), splits);
  kernel<<<grid, 128 * (C + 1), smem, st>>>(tw, tx, a);
  return cudaGetLastError();
}

template <int C, int P, int S, bool EF, int NN>
int residency() {
  constexpr int smem = Shape<C, P, S>::template smem_bytes<NN>();
  auto kernel = tma_gemm<C, P, S, NN, EF>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) return 0;
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, 128 * (C + 1), smem) != cudaSuccess) return 0;
  return n;
}

template <int C, int P, int S, bool EF = false>
constexpr Variant variant(const char* name) {
  return Variant{name,
                 64 * C,
                 P,
                 {launch<C, P, S, EF, 8>, launch<C, P, S, EF, 16>, launch<C, P, S, EF, 24>, launch<C, P, S, EF, 32>},
                 {residency<C, P, S, EF, 8>, residency<C, P, S, EF, 16>, residency<C, P, S, EF, 24>,
                  residency<C, P, S, EF, 32>}};
}

// C x P x S at n = 32: 2 x 2 x 4 holds 160 KB (one block an SM), 2 x 1 x 10 200 KB and
// 1 x 1 x 16 192 KB (cuBLAS-like deep rings of 128 K bytes), the others 72-144 KB; "ef":
// the weight under an evict-first L2 policy.
const Variant kVariants[] = {
    variant<2, 2, 4>("c2p2s4"),   variant<2, 1, 4>("c2p1s4"),   variant<1, 2, 4>("c1p2s4"),
    variant<2, 2, 2>("c2p2s2"),   variant<4, 1, 4>("c4p1s4"),   variant<2, 1, 10>("c2p1s10"),
    variant<1, 1, 16>("c1p1s16"), variant<2, 1, 10, true>("c2p1s10ef"),
};

// Panels a split: the even share, rounded up to whole stages of P (the kernel's loads).
int split_panels(int panels, int splits, int p) { return ((panels + splits - 1) / splits + p - 1) / p * p; }

int nn_index(int m) { return (std::min(std::max(m, 1), 32) + 7) / 8 - 1; }  // n = 8, 16, 24, 32

// max |ours - ref| / max |ref| over the output
double check(const Variant& v, int n, int k, int m, int splits) {
  return probe::check_product(n, k, m, [&](const uint8_t* w, const uint8_t* x, float* out) {
    const int panels = (k + kPanel - 1) / kPanel;
    Args a{out, n, m, k, split_panels(panels, splits, v.panels), 0.5f};
    return v.launch[nn_index(m)](w, x, a, (panels + a.pps - 1) / a.pps, 0);
  });
}

// median us a call over graph replays of `copies` launches on rotated weights (the output
// is not zeroed between launches: timing only)
float time_it(const Variant& v, const probe::Operands& o, int m, int splits) {
  const int n = o.n, k = o.k;
  const int panels = (k + kPanel - 1) / kPanel;
  Args a{o.out, n, m, k, split_panels(panels, splits, v.panels), 1.f};
  const int real_splits = (panels + a.pps - 1) / a.pps;
  auto fn = v.launch[nn_index(m)];
  return probe::graph_time_us(o.copies, [&](int i, cudaStream_t st) {
    return fn(o.w + size_t(i) * n * k, o.x, a, real_splits, st);
  });
}

std::vector<int> int_list(const char* env, std::vector<int> dflt) {
  const char* e = std::getenv(env);
  if (!e) return dflt;
  std::vector<int> v;
  for (const char* q = e; *q; ++q)
    if (q == e || q[-1] == ',') v.push_back(std::atoi(q));
  return v;
}

}  // namespace

int main() {
  const int sms = probe::print_device();

  // Correctness: N not a multiple of the block's rows, K not a multiple of a panel (1040)
  // or of a stage, M at every n, splits that leave a short last one.
  std::printf("\ncorrectness (max |ours - fp64 ref| / max |ref|; 'ok' below 1e-5, 'bf16' below 2e-3):\n");
  // PROBE_SANITIZE=1: a few small checks, then stop (for compute-sanitizer).
  const bool sanitize = std::getenv("PROBE_SANITIZE") != nullptr;
  const std::vector<int> check_ms = sanitize ? std::vector<int>{5, 32} : std::vector<int>{1, 5, 8, 13, 16, 24, 32};
  const std::vector<std::pair<int, int>> check_nk =
      sanitize ? std::vector<std::pair<int, int>>{{37, 6656}, {300, 1040}}
               : std::vector<std::pair<int, int>>{{1000, 4096}, {37, 6656}, {2304, 1040}, {2304, 16384}};
  int wrong = 0;
  for (const Variant& v : kVariants)
    for (int m : check_ms)
      for (auto nk : check_nk) {
        const double e = check(v, nk.first, nk.second, m, 5);
        wrong += e >= 2e-3;
        std::printf("  %-8s M %2d N %5d K %5d: %.2e %s\n", v.name, m, nk.first, nk.second, e,
                    e < 1e-5 ? "ok" : e < 2e-3 ? "bf16" : "WRONG");
      }
  std::printf("%d wrong\n", wrong);
  if (sanitize) return wrong ? 1 : 0;

  std::printf("\ntiming (us a call, median of graph replays, weights rotated over >= 8 copies and >= 400 MB):\n");
  std::printf("%-8s %6s %6s %3s %7s %6s %6s %9s %6s\n", "variant", "N", "K", "M", "splits", "ctas", "res/SM", "us",
              "GB/s");
  const std::vector<int> ms = int_list("PROBE_MS", {1, 8, 16, 32});
  const std::vector<int> fixed = int_list("PROBE_SPLITS", {});
  for (auto nk : probe::timed_shapes()) {
    const int n = nk.first, k = nk.second;
    const size_t wbytes = size_t(n) * k;
    const probe::Operands ops(n, k);
    const int panels = (k + kPanel - 1) / kPanel;
    for (int m : ms) {
      float best = 1e30f;
      const char* best_name = "";
      int best_s = 0;
      for (const Variant& v : kVariants) {
        const int tiles = (n + v.rows - 1) / v.rows, res = v.res[nn_index(m)]();
        if (res == 0) continue;
        // PROBE_SPLITS, else the splits that fill 1, 2, 3 and 4 waves of resident blocks
        std::vector<int> splits = fixed;
        if (splits.empty())
          for (int wave = 1; wave <= 4; ++wave)
            splits.push_back(std::max(1, int(std::lround(double(wave) * res * sms / tiles))));
        int last = -1;
        for (int s : splits) {
          s = std::min(std::max(s, 1), (panels + v.panels - 1) / v.panels);
          const int pps = split_panels(panels, s, v.panels);
          s = (panels + pps - 1) / pps;
          if (s == last) continue;
          last = s;
          const float us = time_it(v, ops, m, s);
          std::printf("%-8s %6d %6d %3d %7d %6d %6d %9.2f %6.0f\n", v.name, n, k, m, s, tiles * s, res, us,
                      wbytes / (us * 1e3));
          if (us < best) best = us, best_name = v.name, best_s = s;
        }
      }
      std::printf("BEST %d x %d M %d: %.2f us (%s, %d splits)\n", n, k, m, best, best_name, best_s);
    }
  }
  return wrong ? 1 : 0;
}
