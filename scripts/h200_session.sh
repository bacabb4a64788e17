#!/usr/bin/env bash
# One device call on the H200: build the CUDA variant, then the stages of MODE;
# logs and results land under $OUT. Carry .whl (see README):
#   bash scripts/h200_session.sh MODE
# The modes that reran a past session's mix (s4a ... s20d) went in the twenty-ninth session:
# BENCHMARKS.md names each call's commit, whose copy of this script has its mode
# (git show COMMIT:scripts/h200_session.sh). Experiments' modes live on their branches.
#   check : tests, error-path stress, SASS, sanitizers, example, quick RMSNorm benchmark
#   verify: tests, error-path stress, SASS, sanitizers
#   bench : the RMSNorm sweep (HF eager, torch.compile, Liger)
#   final : tests, quick add+RMSNorm+FP8 benchmark, SASS, sanitizers (fits ~6 min)
#   tests : the test suite only
#   swiglu: the SwiGLU benchmark (silu_and_mul_fp8, silu_mul)
#   swap_final: GEMM tests; the GEMM under memcheck, racecheck, synccheck; convert 6 with two consumer
#           warpgroups at M 16 / 32 (--tune); the full GEMM benchmark
#   decode: end-to-end decode, ours vs un-kernelized vs Liger: eager tokens/s, and a step in a
#           CUDA graph (GPU time), hf and ours also compiled whole (DECODE_ARGS=--fused-residual: the
#           residual-fusion experiment too)
#   norm_goals: the LayerNorm benchmark (issue 5) and RMSNorm at 1024 / 4096 rows (issue 3)
#   layernorm: layer_norm tests, the LayerNorm benchmark (ours, F.layer_norm,
#           torch.compile, naive), SASS, sanitizers (last: the first cut if 600 s run
#           out; `verify` runs them too)
#   roofline: Nsight Compute over every CUDA kernel and its torch baseline; table and
#           roofline PNG under $OUT (benchmarks/roofline.py)
#   ln_roof: layer_norm tests, the LayerNorm benchmark, then the roofline report
#   tune  : norm/activation tests, the norm layout sweep (benchmarks/tune_norms.cu), quick SwiGLU and
#           add+RMSNorm+FP8 benchmarks, the LayerNorm benchmark
#   tuneonly: the norm layout sweep alone (no package build)
#   shapes: (no package build) every layout of the shapes in SHAPES="name,name" (tune_norms
#           --only), ROUNDS times (2)
#   cuda_tests: every CUDA test case (tests_gpu), nothing else
#   dyn_split: EXPERIMENT (issue 3): the dynamic fp8 scale in the split rows. RMSNorm tests, every
#           layout's output against the default, the dynamic scale's layouts at hidden 16384 and 8192
#           (1-2048 rows), the add + RMSNorm + FP8 benchmark, RMSNorm launches under compute-sanitizer
#   dyn_final: the landed rule of dyn_split: RMSNorm tests, the add + RMSNorm + FP8 benchmark, the
#           RMSNorm launches under compute-sanitizer
#   rows2: convert 7 at M = 2 (issue 4): GEMM tests, --paths at M 1-2 (default, convert 7,
#           convert 6) on the 11 weights (ROWS2_SHAPES), passes ROWS2_PASSES (a b), convert 7 and 8
#           launches under compute-sanitizer
#   pdl: programmatic dependent launch between every kernel (launch.cuh): tests/test_pdl.py and the
#           GEMM graph tests; the decode MLP (--mlp-only), one GEMM after another (--paths default
#           and "no PDL") and the Q4_K decode layer (IK_PDL 1 and 0), passes PDL_PASSES (a b);
#           convert 7 / 8 launches under compute-sanitizer
#   pdl_final: tests/test_pdl.py and the skinny GEMM tests, then default against "no PDL" one GEMM
#           after another at 2304 x 16384 and 4096 x 4096 (M 1, 2, 8), then the decode MLP (M 1, 8, 32)
#   s57: pdl_final's tests, then the k-quant gemvs at M = 1 (fp16 x, both formats) with the
#           "tiled no PDL" column, Q4_K's L2 prefetch depth (IK_KQ_PREFETCH 0, 2, 64), then
#           pdl_final's GEMMs and bf16 Q4_K while time is left
#   s57b: the LayerNorm, add + RMSNorm + FP8, SwiGLU and RMSNorm benchmarks with their
#           "ours no PDL" columns, while time is left
#   s57c-g: the k-quant prefetch depth, the decode layer, the landed tests (BENCHMARKS.md, fifty-seventh session)
#   s57h: tests/test_pdl.py, then every skinny GEMM convert as a dependent without its prefetch
#           (IK_PDL=2) against the default and plainly, one GEMM after another and in the decode MLP
#   pdl_h200: the goal figures with and without the dependent launches, most telling first: the
#           k-quant gemvs (M = 1, fp16 and bf16) and decode layer, the skinny GEMM's goal shapes (default, no PDL,
#           all PDL), LayerNorm, add + RMSNorm + FP8, SwiGLU, RMSNorm (bf16) at 4096 rows while time is left
#   kq_ahead: the k-quant gemv's L2 prefetch (IK_KQ_PREFETCH 1, 1@3, 2@3, 0): three weights and the
#           decode layer, fp16 x
#   pdl_verify: every CUDA test (tests_gpu), then the k-quant and activation launches under
#           compute-sanitizer while time is left
#   card1, card2: the anchors' tables on whatever GPU is lent (an H100 in the fifty-fourth session):
#           card1 the skinny GEMM, LayerNorm and Q4_K (fp16 x, M = 1) benchmarks; card2 the
#           RMSNorm sweep, add + RMSNorm + FP8, SwiGLU and Q4_K with bf16 x, while time is left
#   swiglu_lean: the lean SwiGLU kernel up to 65535 rows (16-byte vectors past 8 MB): activation
#           tests, the SwiGLU benchmark, activation launches under compute-sanitizer, the sweep
#           at 192-4096 rows (two rounds)
#   silu_land: activation tests, the SwiGLU benchmark, activation launches under compute-sanitizer,
#           then SwiGLU's defaults at 1-4096 rows against ab_old/activation.cu (untracked, the
#           kernels before; 256 input copies, ROUNDS rounds in turn)
#   swiglu_tier: activation tests, the SwiGLU benchmark, SwiGLU's lean 4- and 8-byte shapes at
#           4-32 rows with 256 input copies (two rounds), activation launches under compute-sanitizer
#   fp8_final: the fp8 norm and activation tests, the add + RMSNorm + FP8 and SwiGLU benchmarks,
#           SwiGLU's block shapes at 1-16 rows with 256 input copies (tune_norms --max-copies)
#   fp8_verify: compute-sanitizer over the RMSNorm and activation launches (sanitize_cuda.py), and
#           every fp8 norm layout's output at 1, 3 and 133 rows of 16384 (tune_norms --check-only)
#   fp8_tune: (no package build) add + RMSNorm + FP8's defaults at 1-2048 rows of 16384 with this
#           tree's rms_norm.cu and ab_old/rms_norm.cu (untracked) in turn, its layouts, and
#           SwiGLU's general and lean kernels at every forced shape, 1-128 rows
#   split_tune: the split layout at hidden 16384: its outputs under compute-sanitizer,
#           then tune_norms at the goal shapes (no package build)
#   split2: the norm tests and RMSNorm sanitizers with the split defaults, the split
#           layouts' outputs under compute-sanitizer, tune_norms at 1-256 rows of 16384
#           and LayerNorm's split (one exchange a row)
#   split8192: the split rows at hidden 8192: RMSNorm tests and sanitizers, tune_norms and
#           bench_rms_norm at 8192 (the sweep's binary builds meanwhile)
#   ln_sweep: tune_norms over 1-2048 rows of LayerNorm at hidden 16384 (no package build)
#   ln_split: LayerNorm's split rows at hidden 16384: layer_norm tests, tune_norms over
#           1-2048 rows of 16384 (fp16, bf16), every layout's output under
#           compute-sanitizer (--check-only), the LayerNorm benchmark, sanitize_cuda.py
#           --only-layernorm under memcheck and racecheck
#   ln_pair: LayerNorm's two rows a cluster (bf16 hidden 16384 from 672 rows): layer_norm
#           tests, sanitize_cuda.py --only-layernorm under memcheck and racecheck, the
#           LayerNorm benchmark, every layout's output at 1-133 rows under compute-sanitizer
#           (--check-only), tune_norms at bf16 512-2048 x 16384
#   split_final: norm tests, the CUDA k-quant tests, RMSNorm sanitizers, the add + RMSNorm
#           + FP8 benchmark and RMSNorm / add + RMSNorm at hidden 16384 (bench_rms_norm)
#   tune_rms: the layout sweep (no package build) on issue 3's RMSNorm shapes that the flat
#           layouts were never swept on (fused add + fp8 at 128-2048 rows, hidden 8192/16384)
#   tune_piped: the layout sweep (no package build) with RMSNorm's piped layouts, on the
#           many-row norm shapes of issues 3 and 5
#   tune_rows: the RMSNorm layout sweep at hidden 8192 and 16384 from 1 to 256 rows (tune_norms
#           --rows-sweep; no package build)
#   tune_rms_fe: RMSNorm and add + RMSNorm bf16 at hidden 4096 (1-4096 rows), the flat
#           exact fit among the layouts (no package build)
#   tune_wide: the flat exact fits at 2 vectors a thread up to 1024 threads, at hidden
#           8192/16384 (RMSNorm) and LayerNorm's shapes (s11a's sweep, there on branch
#           exp11 whose LayerNorm had 2 vectors a thread at 64-1024 threads; main builds
#           only 64); no package build
#   wgmma_probe: EXPERIMENT (issue 4): benchmarks/wgmma_probe.cu (fp8 wgmma, sm_90a, the
#           weight as the register operand): correctness at odd sizes, timing at the
#           blog's shapes, M 1/8/16/32 (no package build); wgmma_probe_bench adds
#           bench_skinny_gemm.py --quick --no-mlp (ours and _scaled_mm in the same call);
#           wgmma_all: the probe and bench_skinny_gemm.py --no-mlp at all 11 weight shapes
#   tma_probe: EXPERIMENT (issue 4): benchmarks/tma_probe.cu (the weight as wgmma's shared-
#           memory operand, fed by TMA from a producer warp): correctness at odd sizes,
#           timing at the blog's shapes, then compute-sanitizer (memcheck, racecheck,
#           synccheck) on the correctness checks; tma_probe_bench and tma_all as the
#           wgmma ones (bench_skinny_gemm.py beside it)
#   q4k_tests: the k-quant tests (CUDA gemv, tiled layouts, stacked projections)
#   q4k_src: Nsight Compute source pages (stall samples per SASS instruction) of the tiled
#           Q4_K gemv at M = 1: 14336 x 4096 fp16 and bf16 x, 4096 x 14336 fp16 (s20a's)
#   read_floor: what a plain read (and a copy) of the benchmarks' bytes takes (read_floor.py, s5a's)
#   q4k_decode: a Q4_K_M model of Llama-3-8B's shapes (8, then 16 layers: the slope), random
#           weights, decoding one step in a CUDA graph: unquantised, Q4_K_M, stacked, stacked
#           + kernelized, and compiled whole; device time by kernel group (bench_q4k_decode.py)
#   q4k_decode_clean: (prepared, not yet run) the same without the profiler (whose runs
#           slowed later graph replays): 8 layers, every variant; then 32 layers, Q4_K_M only
#   gemm_ring: the skinny GEMM tests (convert 5, the persistent ring, among them), then
#           --tune on all 11 weights at M 1/8/16/32: the default, convert 5 (auto, 3 slots,
#           4 slots at a cluster of 8) and _scaled_mm
#   gemm_ring_sweep: convert 5 at clusters 1-8 and 3 / 4 ring slots on all 11 weights, M 1/16/32
#           (RING_MS: other M; RING_TESTS=1: the skinny GEMM tests first)
#   gemm_ring_ab: the skinny GEMM tests; --tune with the defaults before convert 5
#           (IK_SKINNY_GEMM_RING=0) against convert 5 and _scaled_mm, all 11 weights, M 1-32;
#           then the full benchmark at the new defaults (the MLP included)
#   gemm_verify: the skinny GEMM tests, then compute-sanitizer on the GEMM
#   gemm_mlp_ab: 13312 x 16384 and the decode MLP at M 16 / 17 / 32 with convert 5 off and on, twice
#   carveout_ab: EXPERIMENT, mode on branch gemm-carveout (s24a, no effect): the skinny GEMM
#           tests, then with a shared/L1 carveout hint for convert 1-3 off and on: the decode
#           MLP chain per kernel, 13312 x 16384 and the decode MLP with convert 5 off and on,
#           and all 11 weights at M 1 / 16 / 32 at the defaults
#   ring_big: convert 5's tests, then 13312 x 16384, 16384 x 6656 and the decode MLP at M 16 /
#           17 / 32 with IK_SKINNY_GEMM_RING off and on (its rule past 64 MiB at M 17-32)
#   tma_pkg: convert 6 (the TMA kernel, s25): build, its tests and the config errors, then
#           --tune with convert 6 against the default and _scaled_mm, all 11 weights, M 1 / 8 /
#           16 / 32 (TMA_MS, TMA_SHAPES and TMA_CONFIGS override)
#   gemm_tma_verify: every skinny GEMM test, then compute-sanitizer (memcheck, racecheck and
#           synccheck) on the GEMM
#   gemm_tma_bench: the full GEMM benchmark (11 weights, M 1-32, the decode MLP)
#   tma_epi_ab: the GEMM tests; --tune convert 6's epilogues (warps_per_tile 1: partials by
#           element, 2: by weight row, 3: direct in persistent blocks) against the default and
#           _scaled_mm, 11 weights, M 1 / 8 / 16 / 32 (EPI_MS, EPI_CONFIGS override; s27a-s27c ran their
#           branches' forms); compute-sanitizer (memcheck, racecheck, synccheck) on the GEMM
#   silu_final: activation tests, compute-sanitizer (memcheck, racecheck) on SwiGLU / silu,
#           the SwiGLU benchmark; the skinny GEMM tests and the full GEMM benchmark (s28b ran
#           it on branch silu-lean with benchmarks/ab_silu.py, the lean kernel against the
#           general one, before the benchmark; s28a and s28c-d ran that branch's silu_split_ab
#           and silu_mid)
#   gemm_epi_final: tma_epi_ab's tests and sanitizers, then the full GEMM benchmark
#           row (warps_per_tile 1 / 2), 11 weights, M 8 / 12 / 16 / 24 / 32; compute-sanitizer
#           (memcheck, racecheck, synccheck) on the GEMM; the full GEMM benchmark
#   rows7: the skinny GEMM's convert 7 (M = 1): its tests, sanitizers, and --paths at M = 1
#   rows_final: every skinny GEMM test, then --paths at M = 1 on the 11 weights (default, convert 6, 7)
#   rows_verify: every skinny GEMM test, compute-sanitizer on convert 7's launches
#   rows_land: every skinny GEMM test, convert 7 and 8 under compute-sanitizer, M = 1 on the 11
#          weights (the default, convert 7's one-shot blocks, convert 8): convert 7's persistent blocks
#   rows8: convert 8's tests, --paths at M = 1 (default, convert 6 and 7, convert 8's four forms),
#          compute-sanitizer on convert 7 and 8's launches while time is left
#   rows8_final: the same with every skinny GEMM test instead of convert 8's
#   x_once: EXPERIMENT (issues 3, 5): the norms' x and residual read without allocating in L1
#          (ptx.cuh ld_x, IK_NORM_X_ONCE): norm tests, then tune_norms built both ways, the
#          defaults at XONCE_SHAPES in turn (3 rounds), the LayerNorm benchmark (XONCE_BENCH=1),
#          compute-sanitizer on the norm launches while time is left
#   x_once_final: the norm tests, compute-sanitizer on the LayerNorm launches, then while time
#          is left the A/B (2 rounds) and compute-sanitizer on the RMSNorm launches
#   x_once_ncu: (no package build) Nsight Compute of the norms' default kernels (XNCU_SHAPES) with
#          this tree's x-without-L1 bound and with x read without L1 at every size (L1 / L2 hits,
#          DRAM bytes, long-scoreboard stalls)
#   ln_words: layer_norm tests, LayerNorm launches under memcheck and racecheck, the LayerNorm
#          benchmark, RMSNorm / add + RMSNorm bf16 at hidden 4096 (bench_rms_norm)
#   q4k_read: EXPERIMENT (issue 6): benchmarks/q4k_read_probe.cu, the tiled Q4_K weight read by every
#     division of its bytes (CTAs a tile, warps, blocks in flight), no arithmetic
#   q4k_imma: EXPERIMENT (issue 6): benchmarks/q4k_imma_probe.cu, the tiled Q4_K gemv's m = 1 loop
#           with f16 MMAs (the landed arithmetic) against int8 MMAs on int8 x, in one skeleton;
#           compute-sanitizer on its correctness checks first (no package build)
#   q4k_kscale: the tiled Q4_K gemv at M = 1 over K (N = 14336), fp16 and bf16 x: its fixed part and per-block slope
#   q4k_m1: the k-quant tests, the probe (its "landed" columns are this tree's q4k.cu), the quick fp16 and bf16
#           Q4_K/Q6_K benchmark, compute-sanitizer over the k-quant launches
#   copy_probe: EXPERIMENT (issues 3 and 5): benchmarks/copy_probe.cu, copies of 33.5 and 67 MB
#           each way (cudaMemcpy, LDG/STG shapes and cache hints, bulk copies through a
#           shared-memory ring) and fp16 LayerNorm 4096 x 4096 with rows bulk-loaded into a
#           ring, against the package's; silu_and_mul_fp8 with rows bulk-loaded into a ring (512
#           and 2048 rows); compute-sanitizer first on its small sizes
#   act_src: the activation tests, then tma_src's source pages at 4096 x 4096 M 32 and 1 and
#           28672 x 4096 M 32 (TMA_SRC_CASES overrides)
#   tma_src: Nsight Compute source pages (stall samples per SASS instruction) of convert 6 at
#           28672 x 4096, M 1 and 32 (TMA_SRC_CASES overrides: "N K M;..."): which side of the
#           ring waits, the producer on empty stages or the consumers on full ones
#   gemm_tma_final: every skinny GEMM test, then the full GEMM benchmark (11 weights, M 1-32,
#           the decode MLP; s26i, after convert 6's L2-promotion rule)
#   tma_ncu: Nsight Compute of convert 6 (benchmarks/profile_gemm.py; run in s26b)
#           at 4096 x 4096 and 13312 x 16384, M 1 and 32 (where it trails cuBLASLt at M 32):
#           speed of light, memory workload, warp states, launch statistics; then
#           _scaled_mm's kernel at the same points (TMA_NCU_CASES overrides: "N K M;...")
#   chain_state: the down GEMM after convert 1 and after convert 5, with and without a spin
#           kernel between, and the SM clock / power each variant runs at
#   chain_ncu: Nsight Compute (launch statistics, L1 hit rate, time) of gate_up at the
#           default and at convert 5, each followed by the down GEMM at the default, M 17
#   gemm_chain: each kernel's device time in the decode MLP chain and the gate_up GEMM alone,
#           convert 5 off and on (benchmarks/profile_mlp_chain.py)
#   q4k_decode_compiled: the 8-layer compiled Q4_K_M steps alone, without the profiler
#   q4k_ab: EXPERIMENT (issue 6), mode in 90685fe (run s51a): that tree against ab_old/ (the
#          files at 3f43ce0), ours alone at M = 1 in alternating processes; IK_Q6K_XSUM 0 / 1
#   q4k_bf16_staged: EXPERIMENT (issue 6), mode in 0945a46 (run s51b): bf16 x at m = 1 staged as
#          fp16 x (IK_Q4K_BF16_STAGED=1) against the x-ahead loop, the gemv alone and the decode layer
#   q4k_m1to8: the Q4_K gemv benchmark at every M from 1 to 8, fp16 and bf16, with cuBLAS
#   packed_ab: EXPERIMENT (issue 3): 16-bit products and sums as packed instructions (Pair16::mul /
#           add in RMSNorm's weight product and residual, SwiGLU's product with up). The norm and
#           activation tests, then tune_norms' defaults, this tree against ab_old/cuda_kernels/
#           (untracked: `git show 0bcee16:cuda_kernels/F > ab_old/cuda_kernels/F` for every file, the tree
#           before 421d713; runs s52a-c) in turn, three rounds,
#           every layout's output against the default (--check-only), the SwiGLU, add + RMSNorm +
#           FP8 and RMSNorm benchmarks, and compute-sanitizer on the RMSNorm and activation
#           launches while time is left
#   packed_layer: the decode layer (q4k_layer_once), then packed_ab's A/B (two rounds, no tests) and
#           the add + RMSNorm + FP8 and RMSNorm benchmarks, while time is left
#   q4k_layer: the Q4_K decode layer as a chain of kernels, with separate and with fused
#           projections (bench_q4k_layer.py), bf16 and fp16, twice (q4k_layer_once: once)
#   probe_silu_src: Nsight Compute source pages of SwiGLU at 1 / 32 rows, ours and
#           torch.compile's kernel
#   tune_ln1024: LayerNorm at hidden 1024, 2048-16384 rows, the sweep twice (no package build)
#   tune_ln_edges: the LayerNorm layout sweep at the exact fits' edges (hidden 2048; 1 to
#           133 rows of hidden 16384; 1 x 8192), bf16 (no package build)
#   probe_ln: Inductor's code and Nsight Compute of layer_norm 16384 x 1024 fp16, ours vs
#           torch.compile (ncu_ln.txt)
#   probe_silu: Nsight Compute of silu_and_mul_fp8 at one row, ours vs torch.compile
#   tune_ln: the layout sweep (no package build) on the LayerNorm shapes of issue 5
#   tune_ln_exact: the LayerNorm layout sweep with its exact fits ("flat tx.. i.. exact",
#           "piped tx512 i.. s2 exact") at issue 5's shapes, fp16 and bf16 (no package
#           build); prints the summaries, every flat and exact line, and MISMATCH lines
#   norms_explore: why Triton leads at decode sizes: kernels per call and their device time,
#           ours vs torch.compile vs Liger (benchmarks/profile_latency.py); Nsight Compute of
#           ours vs Liger, rms_norm bf16 1x4096 and 4096x4096 (ncu_norms.txt); the layout
#           sweep with the flat candidates on the decode and lagging shapes
#           (tune_norms --explore; full log tune_explore.log, MISMATCH marks a wrong layout)
#   tp    : tensor-parallel decode (scripts/tp_decode.py) under torchrun + NCCL on every
#           visible GPU: TP2, TP4, ... up to the GPU count; logits vs the un-sharded model,
#           ms/token at batch 1 and 32, kernelized vs not. On one GPU: TP1, then TP2 with
#           both ranks on the GPU through gloo (check only). TP_SIZES / TP_ARGS override.
#           NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
#   q4k   : q4k_gemv/q6k_gemv CUDA tests, the Q4_K/Q6_K gemv benchmark (ours, cuBLAS bf16,
#           dequant+matmul; decode tok/s), SASS, memcheck + racecheck on odd sizes
#   q4k_prof: Nsight Compute stall reasons of the k-quant gemv (the step-shape sweep,
#           q4k_tune, lives at commit 96e3a95 with the knob it needs)
#   q4k_final: the q4k mode with the CUDA tests three times, and Nsight Compute
#   gpu_tests: every CUDA test case, then compute-sanitizer over the FP8 GEMM's launches
#   recheck: every CUDA test case, the quick k-quant benchmark, the gemv's and the GEMM's
#           launches under compute-sanitizer
#   gemm  : skinny_gemm_fp8 tests, its benchmark (vs torch._scaled_mm, decode MLP; md, json
#           and png under $OUT), its SASS, compute-sanitizer memcheck + racecheck on its odd
#           sizes (last: the first cut if 600 s run out)
#   gemm_tune: the skinny GEMM's work-split sweep on the blog's shapes
#   gemm_prof: Nsight Compute (--clock-control none) of the skinny GEMM at 13312 x 16384,
#           M = 1, 16, 32 (ours at the launcher's defaults; M = 32 also with convert 2,
#           the previous default), the f16 pre-pass at M = 32, and torch._scaled_mm's
#           kernel at M = 32: duration, DRAM/L2/L1 throughput and hit rates, issue, pipe
#           utilisation, stall reasons, registers, occupancy (ncu_gemm.txt; key lines printed)
#   gemm_new: skinny_gemm_fp8 tests, the quick benchmark (blog shapes, M 1/8/16/32, MLP),
#           the activation paths side by side (--paths), SASS counts and the main loop's
#           instruction mix (scripts/sass_mix.py), compute-sanitizer on the GEMM (last)
#   final1: the CUDA test cases, tensor-parallel decode, the Q4_K and FP8 GEMM benchmarks
#   final2: the norm/SwiGLU/LayerNorm benchmarks, SASS, compute-sanitizer over every kernel
#   all   : check + bench
set -uo pipefail
MODE=${1:-all}
# The device returns at most 8 files from $OUT: stages write under /tmp/res, and on exit
# everything goes back as one archive (results.tgz) plus the roofline PNG if there is one.
REAL_OUT=${OUT:-/tmp/out}; export OUT=/tmp/res; rm -rf "$OUT"; mkdir -p "$OUT" "$REAL_OUT"
pack() { tar czf "$REAL_OUT/results.tgz" -C "$OUT" . ; cp "$OUT"/*.png "$REAL_OUT"/ 2>/dev/null; true; }
trap pack EXIT
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
status=0
step() { echo; echo "=== $1 ($(date +%T))"; }

environment() {
  step "environment"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/env.txt"
  python3 -c "import torch, kernels, transformers; print('torch', torch.__version__, 'kernels', kernels.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/env.txt"
  c++ --version | head -1 | tee -a "$OUT/env.txt"
}

build() {
  step "build"
  python3 tools/build.py -j 16 2>&1 | tee "$OUT/build.log" | tail -3
  [ "${PIPESTATUS[0]}" = 0 ] || exit 1
  SO=$(ls build/$(python3 tools/build.py --print-variant)/*.abi3.so)
}

tests() {
  step "tests"
  python3 -m pytest tests -q -rfE -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -15
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  if grep -q "Segmentation fault" "$OUT/pytest.log"; then
    step "backtrace of the crash"
    local t
    t=$(grep -m1 -oE "tests/test_[a-z0-9_]+\.py\", line [0-9]+ in [a-z0-9_]+" "$OUT/pytest.log" | sed -E 's/", line [0-9]+ in /::/')
    cuda-gdb -batch -ex run -ex "bt 14" --args python3 -m pytest -x -q -p no:cacheprovider "$t" 2>&1 \
      | grep -E "^#|signal" | cut -c1-400 | tee "$OUT/crash_bt.log"
    step "tests, without the crashing test"
    python3 -m pytest tests -q -rfE -p no:cacheprovider --deselect "$t" 2>&1 | tail -15 | tee "$OUT/pytest_rest.log"
  fi
}

error_paths() {
  # A failing check once crashed while formatting its message (BENCHMARKS.md).
  step "error paths, 20 fresh processes"
  local crashes=0
  for i in $(seq 20); do
    python3 -m pytest -q -p no:cacheprovider tests/test_rms_norm.py tests/test_rms_norm_fp8.py tests/test_activation.py tests/test_layer_norm.py -k "rejects or errors" > /tmp/rejects.log 2>&1 \
      || { crashes=$((crashes+1)); tail -5 /tmp/rejects.log; }
  done
  echo "error-path runs failed: $crashes of 20" | tee "$OUT/error_paths.txt"; [ $crashes = 0 ] || status=1
}

sass() {
  step "SASS: global load and store widths"
  cuobjdump -sass "$SO" | grep -oE "(LDG|STG)\.E[.A-Z0-9]*" | sort | uniq -c | tee "$OUT/sass_summary.txt"
}

# memcheck + racecheck over scripts/sanitize_cuda.py's launches (all, or those its
# arguments select); logs sanitizer_<label>_<tool>.log.
sanitize() {
  local label=$1 tool rc; shift
  step "compute-sanitizer ($label)"
  for tool in memcheck racecheck; do
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 \
      python3 scripts/sanitize_cuda.py "$@" > "$OUT/sanitizer_${label}_$tool.log" 2>&1
    rc=$?; tail -3 "$OUT/sanitizer_${label}_$tool.log"; echo "$tool exit $rc"; [ $rc = 0 ] || status=1
  done
}
sanitizers() { sanitize all; }

example() {
  step "example (make demo's script) and the kernels-benchmark classes"
  python3 example.py 2>&1 | tail -8 | tee "$OUT/example.log"
  python3 benchmarks/benchmark.py 2>&1 | tail -12 | tee "$OUT/kernels_benchmark.log"
}

bench_quick() { step "RMSNorm benchmark (quick)"; python3 benchmarks/bench_rms_norm.py --quick --name bench_quick 2>&1 | tail -40; }
bench_sweep() {
  step "RMSNorm benchmark sweep"
  timeout 330 python3 benchmarks/bench_rms_norm.py --rows 1 4 16 64 256 1024 4096 \
    --fused-rows 1 16 256 4096 2>&1 | tee "$OUT/bench.log" | tail -80
}
bench_swiglu() { step "SwiGLU benchmark"; timeout 240 python3 benchmarks/bench_swiglu.py "$@" 2>&1 | tee "$OUT/bench_swiglu.log" | tail -30; }
bench_decode() { step "decode benchmark"; timeout 300 python3 benchmarks/bench_decode.py "$@" 2>&1 | tee "$OUT/bench_decode.log" | tail -20; }
bench_layernorm() { step "LayerNorm benchmark"; timeout 240 python3 benchmarks/bench_layer_norm.py "$@" 2>&1 | tee "$OUT/bench_layer_norm.log" | tail -30; }
tests_layernorm() {
  step "layer_norm tests"
  python3 -m pytest tests/test_layer_norm.py -q -rfE -p no:cacheprovider 2>&1 | tee "$OUT/pytest_layer_norm.log" | tail -8
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
roofline() {
  step "roofline (Nsight Compute)"
  export PATH="$PATH:/usr/local/cuda/bin"
  command -v ncu >/dev/null || { echo "ncu not found" | tee "$OUT/roofline.log"; status=1; return; }
  ncu --version | tail -1 | tee -a "$OUT/env.txt"
  timeout 480 python3 benchmarks/roofline.py 2>&1 | tee "$OUT/roofline.log" | tail -30
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
# Nsight Compute (--clock-control none, 3 launches) of benchmarks/profile_latency.py's
# point POINT for each implementation in IMPLS, appended to $OUT/FILE; the remaining
# arguments go to ncu (its sections).
ncu_point() {
  local point=$1 file=$2 impls=$3 impl; shift 3
  export PATH="$PATH:/usr/local/cuda/bin"
  for impl in $impls; do
    echo "--- $point $impl" | tee -a "$OUT/$file"
    timeout 90 ncu --clock-control none --profile-from-start off --launch-count 3 "$@" \
      python3 benchmarks/profile_latency.py --ncu-driver --points "$point" --impls "$impl" 2>&1 \
      | grep -vE "^==PROF==|^\s*$" >> "$OUT/$file"
  done
}
# Why torch.compile's silu_and_mul_fp8 leads at one row: Nsight Compute of both kernels
# (duration, cycles, warp states, the stalls per SASS line of ours).
probe_silu() {
  step "silu_and_mul_fp8 at 1 x 13312: Nsight Compute, ours vs torch.compile"
  ncu_point silu_and_mul_fp8:1x13312 ncu_silu.txt "ours compile" --section SpeedOfLight --section LaunchStats \
    --section Occupancy --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --section SourceCounters --print-details all
  grep -E "^---|^  [^ ].*\(|Duration|Elapsed Cycles|SM Active Cycles|Registers Per|Block Size|Grid Size|Warp Cycles Per Issued|Executed Instructions |Stall|stall" \
    "$OUT/ncu_silu.txt" | head -150
}
# Where torch.compile's LayerNorm leads at 16384 x 1024 fp16 (0.95x): Nsight Compute of ours
# and torch.compile's kernel (Inductor's code in the log).
probe_ln() {
  step "layer_norm 16384 x 1024 fp16: Inductor code, Nsight Compute, ours vs torch.compile"
  export PATH="$PATH:/usr/local/cuda/bin"
  TORCH_LOGS=output_code timeout 150 python3 benchmarks/profile_latency.py --points layer_norm:16384x1024 \
    --impls ours,compile > "$OUT/probe_ln.log" 2>&1 || status=1
  grep -E "XBLOCK|R0_BLOCK|RBLOCK|num_warps|def triton|tl.load|tl.store|for r|grid" "$OUT/probe_ln.log" | head -40
  ncu_point layer_norm:16384x1024 ncu_ln.txt "ours compile" --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats
  grep -E "^---|^  [^ ].*\(|Duration|DRAM Throughput|L2 Hit|L1/TEX Hit|Registers Per|Block Size|Grid Size|Achieved Occ|Theoretical Occ|Waves Per SM|Warp Cycles Per Issued|Issued Warp|No Eligible|Stall Long|Stall Barrier|Stall Short" \
    "$OUT/ncu_ln.txt" | head -80
}
# Nsight Compute source pages (stall samples per SASS instruction) of one kernel:
# ncu_src NAME FILTER CMD... (NAME.details.txt, NAME.csv under $OUT)
ncu_src() {
  local name=$1 filter=$2; shift 2
  export PATH="$PATH:/usr/local/cuda/bin"
  timeout 120 ncu --clock-control none --profile-from-start off --kernel-name "$filter" \
    --launch-skip 1 --launch-count 1 --section SpeedOfLight --section LaunchStats --section WarpStateStats \
    --section SourceCounters -f -o "/tmp/$name" "$@" > "$OUT/$name.run.txt" 2>&1
  ncu --import "/tmp/$name.ncu-rep" --page details > "$OUT/$name.details.txt" 2>&1
  ncu --import "/tmp/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/$name.csv" 2>&1
  grep -E "Duration|Grid Size|Block Size|Registers Per|Warp Cycles Per Issued|Executed Ipc A" "$OUT/$name.details.txt" | head -8
}
# Where the tiled Q4_K gemv's warps stall at M = 1 (s20a): fp16 x (the XS loop) and bf16
# x (x ahead), stall samples per SASS instruction and the memory/scheduler pages.
profile_q4k_tiled() {
  step "Nsight Compute: tiled Q4_K gemv, M = 1, stalls per SASS instruction"
  local args name
  for args in "14336 4096 1 tiled fp16" "14336 4096 1 tiled" "4096 14336 1 tiled fp16"; do
    name=ncu_q4k_$(echo "$args" | tr ' ' _)
    ncu_src "$name" regex:kquant --section MemoryWorkloadAnalysis --section SchedulerStats --section Occupancy \
      python3 benchmarks/profile_q4k.py Q4_K $args
    grep -E "DRAM Throughput|Issue Slots Busy|No Eligible|Active Warps Per|Achieved Occ|Theoretical Occ|Eligible Warps" \
      "$OUT/$name.details.txt" | head -12
  done
}
# SwiGLU at decode rows, ours and torch.compile's kernel (s17a)
probe_silu_src() {
  step "Nsight Compute: silu_and_mul_fp8 / silu_mul at 1 and 32 rows, ours and torch.compile"
  local pt impl
  for pt in silu_and_mul_fp8:1x13312 silu_and_mul_fp8:32x13312 silu_mul:1x14336; do
    for impl in ours compile; do
      ncu_src "ncu_src_${pt%%:*}_${pt##*:}_$impl" "regex:silu|triton" python3 benchmarks/profile_latency.py \
        --ncu-driver --points "$pt" --impls "$impl"
    done
  done
}
tests_rms() {
  step "RMSNorm tests"
  python3 -m pytest tests/test_rms_norm_fp8.py tests/test_rms_norm.py -q -rfE -p no:cacheprovider 2>&1 \
    | tee "$OUT/pytest_rms.log" | tail -4
  [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
}
tests_norms() {
  step "norm and activation tests"
  python3 -m pytest tests/test_rms_norm.py tests/test_rms_norm_fp8.py tests/test_layer_norm.py \
    tests/test_activation.py -q -rfE -p no:cacheprovider 2>&1 | tee "$OUT/pytest_norms.log" | tail -8
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
# x_once's A/B: tune_norms with this tree's norms and with IK_NORM_X_ONCE=0 (plain loads)
x_once_ab() {
  local shapes="${XONCE_SHAPES:-layer_norm fp16 1024x16384,layer_norm bf16 1024x16384,layer_norm fp16 4096x4096,layer_norm fp16 16384x1024,layer_norm fp16 8192x5120,layer_norm bf16 128x16384,rms+add+fp8 fp16 128x16384,rms+add+fp8 fp16 512x16384,rms+add+fp8 fp16 1024x16384,rms+add+fp8 fp16 2048x16384,rms bf16 4096x16384,rms bf16 4096x8192,rms bf16 4096x4096,rms+add bf16 1024x16384}"
  wait $tune_pid || { tail -5 "$OUT/tune_build.log"; status=1; return; }
  for f in rms_norm layer_norm; do
    nvcc -std=c++20 -O3 -arch=sm_90 -Icommon -Icuda_kernels -DIK_NORM_X_ONCE=0 -c cuda_kernels/$f.cu -o /tmp/${f}_plain.o &
  done
  wait
  nvcc -arch=sm_90 /tmp/tune_main.o /tmp/rms_norm_plain.o /tmp/layer_norm_plain.o /tmp/activation.o -o /tmp/tune_plain || status=1
  step "defaults, plain loads and x without L1 in turn (3 rounds)"
  for r in $(seq "${XONCE_ROUNDS:-3}"); do
    for b in plain norms; do
      echo "--- $b, round $r"; timeout 80 /tmp/tune_$b --defaults-only --only "$shapes" | grep -v "^copy\|^empty" || status=1
    done
  done 2>&1 | tee "$OUT/x_once_ab.log"
}
tune() {
  step "norm layout sweep (benchmarks/tune_norms.cu)"
  nvcc -std=c++20 -O3 -arch=sm_90 -Icommon -Icuda_kernels benchmarks/tune_norms.cu \
    cuda_kernels/rms_norm.cu cuda_kernels/layer_norm.cu cuda_kernels/activation.cu -o /tmp/tune_norms || { status=1; return; }
  timeout "${TUNE_TIMEOUT:-240}" /tmp/tune_norms "$@" > "$OUT/tune_norms.log" 2>&1; [ $? = 0 ] || status=1
  grep -v "^  " "$OUT/tune_norms.log"
}
# tune_norms from four objects built in parallel (the split modes).
tune_build_par() {
  for f in rms_norm layer_norm activation; do
    nvcc -std=c++20 -O3 -arch=sm_90 -Icommon -Icuda_kernels -c cuda_kernels/$f.cu -o /tmp/$f.o &
  done
  nvcc -std=c++20 -O3 -arch=sm_90 -Icommon -Icuda_kernels -c benchmarks/tune_norms.cu -o /tmp/tune_main.o || return 1
  wait
  nvcc -arch=sm_90 /tmp/tune_main.o /tmp/rms_norm.o /tmp/layer_norm.o /tmp/activation.o -o /tmp/tune_norms
}
# norms_explore's stages. The sweep's binary builds in the background meanwhile.
tune_build_bg() {
  nvcc -std=c++20 -O3 -arch=sm_90 -Icommon -Icuda_kernels benchmarks/tune_norms.cu cuda_kernels/rms_norm.cu \
    cuda_kernels/layer_norm.cu cuda_kernels/activation.cu -o /tmp/tune_norms > "$OUT/tune_build.log" 2>&1 &
  TUNE_PID=$!
}
profile_latency() {
  step "kernels per call and device time (torch.profiler): ours, torch.compile, Liger"
  timeout 200 python3 benchmarks/profile_latency.py 2>&1 | tee "$OUT/profile_latency.log" | grep -vE "^\s*$" | tail -150
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
ncu_norms() {
  step "Nsight Compute: rms_norm bf16, ours vs Liger"
  export PATH="$PATH:/usr/local/cuda/bin"
  command -v ncu >/dev/null || { echo "ncu not found"; status=1; return; }
  local pt
  for pt in rms_norm:1x4096 rms_norm:4096x4096; do
    ncu_point $pt ncu_norms.txt "ours liger" --section SpeedOfLight --section WarpStateStats --section LaunchStats \
      --section Occupancy
  done
  grep -E "^---|^  [^ ].*\(|Duration|Elapsed Cycles|Memory Throughput|DRAM Throughput|Registers Per|Block Size|Grid Size|Theoretical Occ|Achieved Occ|Warp Cycles Per Issued|No Eligible|Stall|Dynamic Shared|Static Shared|Waves Per SM" \
    "$OUT/ncu_norms.txt" | head -160
}
tune_explore() {
  step "norm layout sweep, decode and lagging shapes (tune_norms --explore)"
  wait "$TUNE_PID" || { tail -5 "$OUT/tune_build.log"; status=1; return; }
  timeout 150 /tmp/tune_norms --explore > "$OUT/tune_explore.log" 2>&1; [ $? = 0 ] || status=1
  grep -E "^[^ ]|flat|MISMATCH" "$OUT/tune_explore.log"
}
norms_explore() { tune_build_bg; profile_latency; ncu_norms; tune_explore; }
run_tp() {  # run_tp N [script options]: one torchrun of scripts/tp_decode.py, N processes
  local n=$1; shift
  local log="$OUT/tp_decode_tp$n$([[ " $* " == *" --share-gpu "* ]] && echo _shared_gpu).log"
  echo "--- TP$n $*"
  timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node "$n" scripts/tp_decode.py \
    --out "$OUT" ${TP_ARGS:-} "$@" > "$log" 2>&1
  local rc=$?
  grep -vE "^\s*$|it/s\]|^\*+$|OMP_NUM_THREADS" "$log" | tail -28; echo "TP$n exit $rc"; [ $rc = 0 ] || status=1
}
tp_decode() {
  # A program using NVLink multicast can put a shared host's GPUs out of service (device README).
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  local n sizes="" k=2
  n=$(nvidia-smi -L | wc -l)
  step "tensor-parallel decode, $n GPU(s)"
  while [ $k -le "$n" ]; do sizes="$sizes $k"; k=$((k * 2)); done
  if [ "$n" -ge 2 ]; then
    for k in ${TP_SIZES:-$sizes}; do run_tp "$k"; done
  else
    run_tp 1
    run_tp 2 --share-gpu --check-only
  fi
}
tests_q4k() {
  step "k-quant tests (CUDA gemv; test_q4k.py needs the gguf wheel, else it skips)"
  python3 -m pytest tests/test_q4k_cuda.py tests/test_q4k_tiled.py tests/test_q4k_fuse.py tests/test_q4k.py -q -rfEs -p no:cacheprovider 2>&1 | tee "$OUT/pytest_q4k.log" | tail -12
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
bench_q4k() { step "Q4_K/Q6_K gemv benchmark $*"; timeout 240 python3 benchmarks/bench_q4k.py "$@" 2>&1 | tee -a "$OUT/bench_q4k.log" | tail -60; }
read_floor() { step "plain read and copy at the benchmarks' sizes"; timeout 150 python3 benchmarks/read_floor.py 2>&1 | tee "$OUT/read_floor.log" | tail -25; }
# Where the k-quant gemv's warps stall (Nsight Compute), the large Llama shapes at M = 1.
profile_q4k() {
  step "Nsight Compute: k-quant gemv"
  export PATH="$PATH:/usr/local/cuda/bin"
  local args
  for args in "Q4_K 14336 4096 1" "Q4_K 4096 14336 1" "Q6_K 14336 4096 1"; do
    echo "--- $args" | tee -a "$OUT/ncu_q4k.txt"
    timeout 120 ncu --kernel-name regex:kquant --launch-skip 3 --launch-count 1 --section SpeedOfLight \
      --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
      python3 benchmarks/profile_q4k.py $args 2>&1 | grep -vE "^==PROF==|^\s*$" >> "$OUT/ncu_q4k.txt"
  done
  grep -E "^---|Duration|Memory Throughput|DRAM Through|Issued Warp|No Eligible|Active Warps Per|Achieved Occ|Stall|Registers|Warp Cycles Per Issued" "$OUT/ncu_q4k.txt" | head -80
}
sass_q4k() {
  step "SASS of the k-quant gemv: loads and register use"
  cuobjdump -sass "$SO" | awk '/Function : .*kquant_gemv_kernel/{f=1} /Function : /{if ($0 !~ /kquant_gemv_kernel/) f=0} f' \
    | grep -oE "(LDG|STG)\.E[.A-Z0-9]*" | sort | uniq -c | tee "$OUT/sass_q4k.txt"
  cuobjdump -res-usage "$SO" 2>/dev/null | grep -A1 -E "kquant_gemv_kernel" | grep -oE "REG:[0-9]+" | sort | uniq -c | tee -a "$OUT/sass_q4k.txt"
}
sanitizers_q4k() { sanitize q4k --only-kquants; }
tests_gemm() {
  step "skinny_gemm_fp8 tests"
  python3 -m pytest tests/test_skinny_gemm.py -q -rfE -p no:cacheprovider 2>&1 | tee "$OUT/pytest_skinny_gemm.log" | tail -8
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
bench_gemm() {
  step "skinny GEMM benchmark"
  timeout 300 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" "$@" 2>&1 | tee -a "$OUT/bench_skinny_gemm.log" | tail -150
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
sanitizers_gemm() { sanitize gemm skinny_gemm; }
# memcheck, racecheck and synccheck (convert 6's barriers) over the skinny GEMM's launches.
sanitizers_gemm3() {
  local tool rc
  export PATH="$PATH:/usr/local/cuda/bin"
  for tool in memcheck racecheck synccheck; do
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 \
      python3 scripts/sanitize_cuda.py skinny_gemm > "$OUT/sanitizer_gemm_$tool.log" 2>&1
    rc=$?; echo "$tool exit $rc"; tail -2 "$OUT/sanitizer_gemm_$tool.log"; [ $rc = 0 ] || status=1; pack
  done
}
# the flat exact fits at 2 vectors a thread up to 1024 threads (s11a's sweep)
wide_shapes() {
  local d r sh shapes=""
  for d in 8192 16384; do for r in 1 16 256 4096; do shapes="$shapes${shapes:+,}rms bf16 ${r}x$d"; done; done
  for d in 8192 16384; do for r in 1 256 4096; do shapes="$shapes,rms+add bf16 ${r}x$d"; done; done
  for r in 1 128 512 2048; do shapes="$shapes,rms+add+fp8 fp16 ${r}x16384"; done
  for sh in 4096x4096 16384x1024 1024x16384 4096x8192 8192x5120; do shapes="$shapes,layer_norm fp16 $sh,layer_norm bf16 $sh"; done
  echo "$shapes,layer_norm bf16 16384x2048,layer_norm bf16 1x16384,layer_norm bf16 264x16384,layer_norm bf16 512x16384"
}
# issue 5's LayerNorm shapes, fp16 and bf16, as tune_norms --only takes them
ln_exact_shapes() {
  local dt sh shapes=""
  for dt in fp16 bf16; do
    for sh in 4096x4096 16384x1024 1024x16384 8192x5120 4096x8192; do shapes="$shapes${shapes:+,}layer_norm $dt $sh"; done
  done
  echo "$shapes"
}
sass_mix_gemm() {
  step "main-loop instruction mix of skinny_gemm_fp8 per 64-byte chunk (scripts/sass_mix.py)"
  cuobjdump -sass "$SO" | python3 scripts/sass_mix.py | tee "$OUT/sass_mix_gemm.txt"
  cuobjdump -res-usage "$SO" 2>/dev/null | grep -A1 -E "skinny_gemm|fp8_rows_to_f16" | grep -oE "REG:[0-9]+ STACK:[0-9]+ SHARED:[0-9]+ LOCAL:[0-9]+" \
    | sort | uniq -c | tee -a "$OUT/sass_mix_gemm.txt"
}
sass_gemm() {
  step "SASS of skinny_gemm_fp8 (per kernel: loads, MMAs, conversions, local memory)"
  cuobjdump -sass "$SO" | awk '
    /Function :/ { if (name) report(); name = ($0 ~ /skinny_gemm/) ? $3 : ""; sub(/.*skinny_gemm_/, "", name); delete c; next }
    name { while (match($0, /(LDG|STG|LDL|STL|HMMA|F2FP)[.A-Z0-9_]*/)) { c[substr($0, RSTART, RLENGTH)]++; $0 = substr($0, RSTART + RLENGTH) } }
    function report(  k, s) { s = ""; for (k in c) s = s " " k "=" c[k]; print name ":" s }
    END { if (name) report() }' | tee "$OUT/sass_gemm.txt"
}
# Where the skinny GEMM's warps stall and which pipe limits (Nsight Compute, real clocks).
profile_gemm() {
  step "Nsight Compute: skinny GEMM, 13312 x 16384"
  export PATH="$PATH:/usr/local/cuda/bin"
  command -v ncu >/dev/null || { echo "ncu not found" | tee "$OUT/ncu_gemm.txt"; status=1; return; }
  local f="$OUT/ncu_gemm.txt" spec impl m filter rc
  local sections=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats
    --section InstructionStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
    --section Occupancy --section LaunchStats)
  local metrics=(--metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active')
  for spec in "ours 1" "ours 16" "ours 32" "ours 32 0 0 0 2" "prepass 32" "scaled_mm 32"; do
    set -- $spec; impl=$1; m=$2; shift 2
    case $impl in
      ours) filter=(--kernel-name regex:skinny_gemm) ;;  # every convert's kernel (not the f16 pre-pass)
      prepass) filter=(--kernel-name regex:fp8_rows_to_f16); impl=ours ;;
      *) filter=() ;;
    esac
    echo "--- $spec" | tee -a "$f"
    timeout 150 ncu --clock-control none --profile-from-start off "${filter[@]}" --launch-skip 2 --launch-count 1 \
      "${sections[@]}" "${metrics[@]}" --print-details all \
      python3 benchmarks/profile_gemm.py $impl 13312 16384 $m "$@" > /tmp/ncu_one.txt 2>&1
    rc=$?
    if [ $rc != 0 ]; then  # an unknown metric name fails the run: again with the sections only
      grep -m3 -E "ERROR|rror" /tmp/ncu_one.txt
      timeout 150 ncu --clock-control none --profile-from-start off "${filter[@]}" --launch-skip 2 --launch-count 1 \
        "${sections[@]}" python3 benchmarks/profile_gemm.py $impl 13312 16384 $m "$@" > /tmp/ncu_one.txt 2>&1
    fi
    grep -vE "^==PROF==|^\s*$" /tmp/ncu_one.txt >> "$f"
  done
  grep -E "^---|Context [0-9]+, Stream|Duration|DRAM Through|Memory Throughput|L1/TEX Cache Through|L2 Cache Through|L1/TEX Hit Rate|L2 Hit Rate|Compute \(SM\) Through|Issued Warp|Issue Slots Busy|No Eligible|Active Warps Per Sch|Eligible Warps|Warp Cycles Per Issued|Executed Ipc Active|Registers Per|Achieved Occ|Theoretical Occ|Block Limit|Grid Size|Block Size|Dynamic Shared|pipe_(tensor|alu|fma|fmaheavy|xu|lsu|uniform|adu|cbu)[a-z_]*(_op_hmma)?[a-z_]*\.avg\.pct|stalled_(long_scoreboard|short_scoreboard|math_pipe_throttle|mio_throttle|lg_throttle|wait|not_selected|barrier|no_instruction|dispatch_stall|selected|tex_throttle|membar|drain|imc_miss|branch_resolving|sleeping|misc)_per" "$f" \
    | grep -vE " 0(\.0+)?$" | cut -c1-150 | head -230
}
tests_gpu() {
  # The CUDA cases (-k cuda: the device parameter, test_q4k_cuda.py); CI runs the rest: the
  # CPU cases, the Metal harness, ROCm ISA checks, the TP script on gloo, the build checks.
  step "tests (CUDA cases)"
  python3 -m pytest tests -q -rfE -p no:cacheprovider -k cuda --ignore=tests/test_metal_harness.py \
    --ignore=tests/test_metal_host.py --ignore=tests/test_rocm_isa.py --ignore=tests/test_tp.py \
    --ignore=tests/test_build.py --ignore=tests/test_benchmarks_smoke.py --ignore=tests/test_roofline.py \
    2>&1 | tee "$OUT/pytest_gpu.log" | tail -15
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
# The activation tests, the SwiGLU benchmark, the activation launches under compute-sanitizer,
# then a wait for the sweep's binary (built meanwhile).
act_verify() {
  step "activation tests"
  python3 -m pytest tests/test_activation.py -q -rfE -p no:cacheprovider 2>&1 \
    | tee "$OUT/pytest_activation.log" | tail -3; [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
  bench_swiglu; pack
  sanitize act --only-activations; pack
  wait $tune_pid || { tail -5 "$OUT/tune_build.log"; status=1; }
}
bench_fp8() { step "add+RMSNorm+FP8 benchmark"; timeout 200 python3 benchmarks/bench_norm_fp8.py "$@" 2>&1 | tee "$OUT/bench_norm_fp8.log" | tail -30; }

environment
case "$MODE" in wgmma_probe|wgmma_probe_bench|wgmma_all|tma_probe|tma_probe_bench|tma_all) PROBE=${MODE%%_*} ;; *) PROBE= ;; esac
if [ -n "$PROBE" ]; then
  case "$MODE" in *_all) export PROBE_SHAPES="2304:16384,13312:16384,16384:6656,6144:4096,4096:4096,28672:4096,4096:14336,1280:8192,1024:8192,7168:8192,8192:3584" ;; esac
  if [ "$MODE" != "${PROBE}_probe" ]; then ( build ) > "$OUT/build_bg.log" 2>&1 & build_pid=$!; fi
  step "$PROBE probe"
  nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Xptxas -v -Icommon -Icuda_kernels "benchmarks/${PROBE}_probe.cu" -o "/tmp/${PROBE}_probe" \
    > "$OUT/${PROBE}_probe_build.log" 2>&1 || { tail -20 "$OUT/${PROBE}_probe_build.log"; status=1; }
  timeout 300 "/tmp/${PROBE}_probe" > "$OUT/${PROBE}_probe.log" 2>&1 || status=1
  grep -vE " (ok|bf16)$" "$OUT/${PROBE}_probe.log" | head -150; grep -cE " (ok|bf16)$" "$OUT/${PROBE}_probe.log"; pack
  if [ "$PROBE" = tma ] && [ "$MODE" = tma_probe ]; then
    step "compute-sanitizer on the TMA probe's small checks"
    export PATH="$PATH:/usr/local/cuda/bin"
    for tool in memcheck racecheck synccheck; do
      PROBE_SANITIZE=1 timeout 200 compute-sanitizer --tool $tool --print-limit 5 /tmp/tma_probe 2>&1 | tail -3
    done
  fi
  if [ "$MODE" != "${PROBE}_probe" ]; then
    wait $build_pid || { tail -5 "$OUT/build_bg.log"; status=1; }
    case "$MODE" in *_all) bench_gemm --no-mlp ;; *) bench_gemm --quick --no-mlp ;; esac
  fi
  echo "session status $status"; exit $status
fi
# The split layout (row_split.cuh) at hidden 16384: its outputs against the default's
# under compute-sanitizer at odd rows, then the sweep at the goal shapes (s32).
if [ "$MODE" = split_tune ]; then
  step "build tune_norms"
  tune_build_par || { echo "build failed"; exit 1; }
  step "compute-sanitizer on every layout's output at odd rows of 16384 (--check-only)"
  export PATH="$PATH:/usr/local/cuda/bin"
  for tool in memcheck racecheck synccheck; do
    timeout 150 compute-sanitizer --tool $tool --print-limit 5 /tmp/tune_norms --check-only > "$OUT/split_$tool.log" 2>&1
    echo "$tool rc $?: $(tail -1 "$OUT/split_$tool.log")"; grep -c checked "$OUT/split_$tool.log"
  done
  grep -h MISMATCH "$OUT"/split_*.log | sort | uniq | head -20
  step "the sweep at hidden 16384"
  timeout "${TUNE_TIMEOUT:-300}" /tmp/tune_norms --only "${SPLIT_SHAPES:-layer_norm fp16 1024x16384,layer_norm bf16 1024x16384,layer_norm bf16 512x16384,layer_norm bf16 2048x16384,layer_norm bf16 264x16384,rms+add+fp8 fp16 128x16384,rms+add+fp8 fp16 512x16384,rms+add+fp8 fp16 1024x16384,rms+add+fp8 fp16 2048x16384,rms bf16 1024x16384,rms bf16 4096x16384,rms bf16 256x16384,rms+add bf16 1024x16384,rms+add bf16 256x16384}" > "$OUT/tune_norms.log" 2>&1 || status=1
  grep -v "^  " "$OUT/tune_norms.log"
  echo "--- split, piped and exact lines"
  grep -E "split|exact|MISMATCH" "$OUT/tune_norms.log" | head -150
  echo "session status $status"; exit $status
fi
if [ "$MODE" = tuneonly ]; then tune; echo "session status $status"; exit $status; fi
# shapes (no package build): every layout of the norm and SwiGLU shapes named in SHAPES
# (tune_norms --only, any rows and hidden size), ROUNDS times (default 2). The thirty-ninth
# session's calls: s39d, LayerNorm bf16 512-1024 x 16384 ("ln_cross"); s39f, RMSNorm and
# add + RMSNorm (+ FP8) at hidden 8192, LayerNorm fp16 2560-4096 x 16384 ("rule_sweep").
# TUNE_ARGS: more tune_norms flags (e.g. --max-copies 256).
# AB_FLAGS="-D..." and/or AB_SRC=DIR (rms_norm.cu / layer_norm.cu / activation.cu found there replace the
# tree's: an older version kept untracked, e.g. `git show REV:cuda_kernels/layer_norm.cu >
# ab_old/layer_norm.cu`) build a second tune_norms (/tmp/tune_ab), run in turn with this
# tree's each round; DEFAULT_SHAPES (optional) are timed at their default layouts only.
if [ "$MODE" = shapes ]; then
  step "build tune_norms${AB_FLAGS:+ (and with $AB_FLAGS)}"
  tune_build_par > "$OUT/tune_build.log" 2>&1 &
  tune_pid=$!
  bins=norms
  if [ -n "${AB_FLAGS:-}${AB_SRC:-}" ]; then
    ab_pids=""
    for f in rms_norm layer_norm activation; do
      src=cuda_kernels/$f.cu; [ -n "${AB_SRC:-}" ] && [ -f "$AB_SRC/$f.cu" ] && src=$AB_SRC/$f.cu
      echo "ab: $src ${AB_FLAGS:-}"
      nvcc -std=c++20 -O3 -arch=sm_90 -Icommon -Icuda_kernels ${AB_FLAGS:-} -c $src -o /tmp/${f}_ab.o &
      ab_pids="$ab_pids $!"
    done
    for p in $ab_pids; do wait $p || exit 1; done
    bins="norms ab"
  fi
  wait $tune_pid || { tail -5 "$OUT/tune_build.log"; exit 1; }
  if [ "$bins" != norms ]; then
    nvcc -arch=sm_90 /tmp/tune_main.o /tmp/rms_norm_ab.o /tmp/layer_norm_ab.o /tmp/activation_ab.o -o /tmp/tune_ab || exit 1
  fi
  step "tune_norms --only \"${SHAPES:-}\" (defaults only: \"${DEFAULT_SHAPES:-}\"), ${ROUNDS:-2} rounds ($bins)"
  for r in $(seq "${ROUNDS:-2}"); do
    for b in $bins; do
      echo "--- $b, round $r"
      [ -n "${SHAPES:-}" ] && { timeout 240 /tmp/tune_$b ${TUNE_ARGS:-} --only "$SHAPES" || status=1; }
      [ -n "${DEFAULT_SHAPES:-}" ] && { timeout 120 /tmp/tune_$b ${TUNE_ARGS:-} --defaults-only --only "$DEFAULT_SHAPES" || status=1; }
    done
  done > "$OUT/shapes.log" 2>&1
  grep -v "^  " "$OUT/shapes.log"
  echo "session status $status"; exit $status
fi
if [ "$MODE" = x_once_ncu ]; then
  step "build tune_norms, and with x read without L1 at every size"
  tune_build_par > "$OUT/tune_build.log" 2>&1 & tune_pid=$!
  for f in rms_norm layer_norm; do
    nvcc -std=c++20 -O3 -arch=sm_90 -Icommon -Icuda_kernels -DIK_NORM_X_ONCE_BYTES=INT64_MAX \
      -c cuda_kernels/$f.cu -o /tmp/${f}_ab.o &
  done
  wait
  nvcc -arch=sm_90 /tmp/tune_main.o /tmp/rms_norm_ab.o /tmp/layer_norm_ab.o /tmp/activation.o -o /tmp/tune_ab || exit 1
  export PATH="$PATH:/usr/local/cuda/bin"
  metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,l1tex__t_sector_hit_rate.pct,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,sm__warps_active.avg.pct_of_peak_sustained_active
  IFS=',' read -ra xshapes <<< "${XNCU_SHAPES:-layer_norm fp16 1024x16384,layer_norm fp16 2048x16384,layer_norm fp16 4096x8192,layer_norm bf16 4096x16384}"
  for sh in "${xshapes[@]}"; do
    for b in norms ab; do
      step "ncu: $sh, $b"
      timeout 120 ncu --cache-control all --clock-control none -k regex:"layer_norm|rms_norm" --launch-skip 40 \
        --launch-count 2 --metrics $metrics /tmp/tune_$b --defaults-only --only "$sh" 2>&1 \
        | grep -E "^  [a-z_]+<|layer_norm|rms_norm|__|us \(" | grep -v "^==PROF" | tee -a "$OUT/x_once_ncu.log" | tail -26
    done
  done; pack
  echo "session status $status"; exit $status
fi
# fp8_tune (thirty-sixth session; no package build): the fp8 norm outputs a pair a cvt
# against the build before it (ab_old/rms_norm.cu, untracked, which s36a made with
# `git show c06a88e:cuda_kernels/rms_norm.cu > ab_old/rms_norm.cu`), defaults
# alternating, then every layout; SwiGLU's lean kernel at every forced shape.
if [ "$MODE" = fp8_tune ]; then
  step "tune_norms, this tree's and with ab_old/rms_norm.cu"
  tune_build_par > "$OUT/tune_build.log" 2>&1 & tune_pid=$!
  nvcc -std=c++20 -O3 -arch=sm_90 -Icommon -Icuda_kernels -c ab_old/rms_norm.cu -o /tmp/rms_norm_old.o \
    > "$OUT/tune_build_old.log" 2>&1 || status=1
  wait $tune_pid || { tail -5 "$OUT/tune_build.log"; status=1; }
  nvcc -arch=sm_90 /tmp/tune_main.o /tmp/rms_norm_old.o /tmp/layer_norm.o /tmp/activation.o -o /tmp/tune_old || status=1
  fp8=$(printf 'rms+add+fp8 fp16 %sx16384,' 1 128 512 1024 2048)
  step "defaults, old and new in turn (3 rounds)"
  for r in 1 2 3; do
    for b in old norms; do
      echo "--- $b, round $r"; timeout 60 /tmp/tune_$b --defaults-only --only "$fp8" | grep -v "^copy\|^empty" || status=1
    done
  done 2>&1 | tee "$OUT/fp8_ab.log"
  step "every layout, new build"
  timeout 150 /tmp/tune_norms --only "$(printf 'rms+add+fp8 fp16 %sx16384,' 512 1024 2048)" > "$OUT/fp8_layouts.log" 2>&1 || status=1
  grep -v "^  " "$OUT/fp8_layouts.log"; grep -E "split|exact|MISMATCH" "$OUT/fp8_layouts.log" | head -40
  step "SwiGLU, every shape (general and lean)"
  timeout 150 /tmp/tune_norms --only "$(printf 'silu_and_mul_fp8 fp16 %sx13312,' 1 8 16 32 64 128)silu_mul bf16 1x14336,silu_mul bf16 8x14336,silu_mul bf16 32x14336" \
    > "$OUT/silu_shapes.log" 2>&1 || status=1
  grep -v "^  " "$OUT/silu_shapes.log"; grep -E "lean|MISMATCH" "$OUT/silu_shapes.log" | head -120
  echo "session status $status"; exit $status
fi
if [ "$MODE" = tune_rms ]; then
  tune --only "rms+add+fp8 fp16 128x16384,rms+add+fp8 fp16 512x16384,rms+add+fp8 fp16 2048x16384,rms bf16 4096x4096,rms bf16 4096x8192,rms bf16 4096x16384,rms bf16 256x16384"
  grep -E "^rms" "$OUT/tune_norms.log"; echo "session status $status"; exit $status
fi
if [ "$MODE" = tune_piped ]; then
  TUNE_TIMEOUT=540 tune --only "rms bf16 4096x4096,rms bf16 4096x8192,rms bf16 4096x16384,rms bf16 256x8192,rms bf16 256x16384,rms+add bf16 4096x4096,rms+add+fp8 fp16 128x16384,rms+add+fp8 fp16 512x16384,rms+add+fp8 fp16 2048x16384,rms+add+fp8dyn fp16 2048x16384,layer_norm fp16 4096x4096,layer_norm fp16 16384x1024,layer_norm fp16 1024x16384,layer_norm fp16 8192x5120,layer_norm fp16 4096x8192"
  grep -E "piped|MISMATCH" "$OUT/tune_norms.log" | sort -k1,3 -s | head -150; echo "session status $status"; exit $status
fi
if [ "$MODE" = tune_rows ]; then
  TUNE_TIMEOUT=420 tune --rows-sweep
  grep -E "exact|MISMATCH" "$OUT/tune_norms.log" | head -80; echo "session status $status"; exit $status
fi
if [ "$MODE" = tune_ln_exact ]; then
  TUNE_TIMEOUT=300 tune --only "$(ln_exact_shapes)"
  echo "--- flat and exact layouts, MISMATCH lines"
  grep -E "flat tx|exact|MISMATCH" "$OUT/tune_norms.log" | head -120; echo "session status $status"; exit $status
fi
if [ "$MODE" = tune_rms_fe ]; then
  TUNE_TIMEOUT=120 tune --only "rms bf16 1x4096,rms bf16 16x4096,rms bf16 256x4096,rms bf16 4096x4096,rms+add bf16 1x4096,rms+add bf16 16x4096,rms+add bf16 256x4096,rms+add bf16 4096x4096"
  grep -E "flat tx|exact|MISMATCH" "$OUT/tune_norms.log" | grep -v "r1 c" | head -80; echo "session status $status"; exit $status
fi
if [ "$MODE" = tune_ln_edges ]; then
  tune --only "${LN_EDGES:-layer_norm bf16 16384x2048,layer_norm bf16 1x16384,layer_norm bf16 64x16384,layer_norm bf16 132x16384,layer_norm bf16 133x16384,layer_norm bf16 1x8192}"
  grep -E "flat tx.*i4|exact|MISMATCH" "$OUT/tune_norms.log" | head -60; echo "session status $status"; exit $status
fi
if [ "$MODE" = tune_wide ]; then
  TUNE_TIMEOUT=400 tune --only "$(wide_shapes)"
  grep -E "exact|MISMATCH" "$OUT/tune_norms.log" | head -150; echo "session status $status"; exit $status
fi
if [ "$MODE" = tune_ln1024 ]; then
  # LayerNorm at hidden 1024: 64 threads x 2 against a warp x 4, 2048-16384 rows, twice
  tune --only "layer_norm fp16 2048x1024,layer_norm fp16 4096x1024,layer_norm fp16 8192x1024,layer_norm fp16 16384x1024,layer_norm bf16 16384x1024"
  timeout 100 /tmp/tune_norms --only "layer_norm fp16 2048x1024,layer_norm fp16 4096x1024,layer_norm fp16 8192x1024,layer_norm fp16 16384x1024,layer_norm bf16 16384x1024" \
    > "$OUT/tune_norms_2.log" 2>&1 || status=1
  grep -hE "flat tx(64 i2|32 i4) exact" "$OUT/tune_norms.log" "$OUT/tune_norms_2.log"; echo "session status $status"; exit $status
fi
if [ "$MODE" = tune_ln ]; then
  tune --only "layer_norm fp16 8192x5120,layer_norm fp16 16384x1024,layer_norm fp16 1024x16384,layer_norm fp16 4096x4096,layer_norm fp16 4096x8192"
  grep -E "^  layer_norm" "$OUT/tune_norms.log" | sort -k5 -n | head -40; echo "session status $status"; exit $status
fi
# The Q4_K m = 1 probe (benchmarks/q4k_imma_probe.cu, linked with the package's q4k.cu):
# compute-sanitizer on its correctness checks, then the timing.
q4k_imma_probe() {
  step "Q4_K m = 1 inner loops: f16 MMA against int8 MMA on int8 x (benchmarks/q4k_imma_probe.cu)"
  nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xptxas -v -Icommon -Icuda_kernels \
    benchmarks/q4k_imma_probe.cu cuda_kernels/q4k.cu -o /tmp/q4k_imma_probe > "$OUT/q4k_imma_build.log" 2>&1 ||
    { tail -20 "$OUT/q4k_imma_build.log"; status=1; return; }
  export PATH="$PATH:/usr/local/cuda/bin"
  for tool in memcheck racecheck; do
    PROBE_SANITIZE=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/q4k_imma_probe > "$OUT/q4k_imma_$tool.log" 2>&1
    rc=$?; echo "$tool exit $rc: $(tail -1 "$OUT/q4k_imma_$tool.log")"; [ $rc = 0 ] || status=1
  done
  timeout 400 /tmp/q4k_imma_probe > "$OUT/q4k_imma.log" 2>&1 || status=1
  grep -v "^ \{3,\}[0-9]* x" "$OUT/q4k_imma.log"
}
if [ "$MODE" = q4k_imma ]; then q4k_imma_probe; echo "session status $status"; exit $status; fi
# q4k_read (forty-first session; no package build): benchmarks/q4k_read_probe.cu, the
# tiled Q4_K weight read by every division of the bytes, no arithmetic.
if [ "$MODE" = q4k_read ]; then
  step "Q4_K reads by division of the bytes (benchmarks/q4k_read_probe.cu)"
  nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a -Icommon -Icuda_kernels -Ibenchmarks \
    benchmarks/q4k_read_probe.cu -o /tmp/q4k_read_probe > "$OUT/q4k_read_build.log" 2>&1 ||
    { tail -20 "$OUT/q4k_read_build.log"; exit 1; }
  for r in 1 2; do echo "--- round $r"; timeout 200 /tmp/q4k_read_probe || status=1; done 2>&1 | tee "$OUT/q4k_read.log"
  echo "session status $status"; exit $status
fi
if [ "$MODE" = copy_probe ]; then
  step "copy probe (benchmarks/copy_probe.cu)"
  nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a -Xptxas -v -Icommon -Icuda_kernels benchmarks/copy_probe.cu \
    cuda_kernels/layer_norm.cu cuda_kernels/activation.cu -o /tmp/copy_probe > "$OUT/copy_probe_build.log" 2>&1 || { tail -20 "$OUT/copy_probe_build.log"; exit 1; }
  export PATH="$PATH:/usr/local/cuda/bin"
  for tool in memcheck racecheck synccheck; do
    PROBE_SANITIZE=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/copy_probe > "$OUT/copy_probe_$tool.log" 2>&1
    rc=$?; echo "$tool exit $rc: $(grep -c MISMATCH "$OUT/copy_probe_$tool.log") mismatches; $(tail -1 "$OUT/copy_probe_$tool.log")"; [ $rc = 0 ] || status=1
  done
  timeout 300 /tmp/copy_probe > "$OUT/copy_probe.log" 2>&1 || status=1
  cat "$OUT/copy_probe.log"; echo "session status $status"; exit $status
fi
# LayerNorm at hidden 16384 from 1 to 2048 rows, every layout (tune_norms; the binary
# is built).
ln_sweep() {
  local shapes
  shapes="$(printf 'layer_norm fp16 %sx16384,' 1 64 127 128 160 192 224 263 264 384 512 768 1024 2048; printf 'layer_norm bf16 %sx16384,' 1 64 127 128 160 192 224 263 264 384 512 768 1024 2048 4096)layer_norm bf16 4096x8192"
  step "the LayerNorm sweep at hidden 16384 (split: 2 items one exchange, 4 items two)"
  timeout 300 /tmp/tune_norms --only "$shapes" > "$OUT/tune_ln.log" 2>&1 || status=1
  grep -v "^  " "$OUT/tune_ln.log"; grep -E "split|exact" "$OUT/tune_ln.log"; pack
}
if [ "$MODE" = ln_sweep ]; then
  tune_build_par > "$OUT/tune_build.log" 2>&1 || { tail -20 "$OUT/tune_build.log"; exit 1; }
  ln_sweep; echo "session status $status"; exit $status
fi
# Every LayerNorm layout's output at the shapes in $1 (tune_norms --check-only, the binary
# built) under compute-sanitizer's racecheck and memcheck.
# compute-sanitizer (racecheck, memcheck) over tune_norms --check-only: every layout's output
# at the shapes of $2 against the default's; logs check_<label>_<tool>.log.
layout_check() {
  local label=$1 only=$2 tool
  step "compute-sanitizer on every layout's output ($label: $only; --check-only)"
  export PATH="$PATH:/usr/local/cuda/bin"
  for tool in racecheck memcheck; do
    timeout 100 compute-sanitizer --tool $tool --print-limit 5 /tmp/tune_norms --check-only --only "$only" \
      > "$OUT/check_${label}_$tool.log" 2>&1
    echo "$tool rc $?: $(tail -1 "$OUT/check_${label}_$tool.log")"; grep -c checked "$OUT/check_${label}_$tool.log"
  done
  grep -h "MISMATCH" "$OUT"/check_"$label"_*.log | sort | uniq | head -10; pack
}
ln_check() { layout_check ln "$1"; }
# ln_split: the sweep's binary builds beside the package.
case "$MODE" in ln_split|ln_pair|pair_verify|fp8_verify|fp8_final|swiglu_tier|swiglu_lean|silu_land|packed_ab|packed_layer|dyn_split) tune_build_par > "$OUT/tune_build.log" 2>&1 & tune_pid=$! ;; esac
# packed_ab: tune_norms' objects from ab_old/cuda_kernels (the tree before the change).
if [ "$MODE" = packed_ab ] || [ "$MODE" = packed_layer ]; then
  ( for f in rms_norm activation; do
      nvcc -std=c++20 -O3 -arch=sm_90 -Icommon -Iab_old/cuda_kernels -c ab_old/cuda_kernels/$f.cu -o /tmp/${f}_old.o &
    done; wait ) > "$OUT/tune_build_old.log" 2>&1 & old_pid=$!
fi
# silu_land: a second tune_norms with ab_old/activation.cu (untracked: the SwiGLU kernels before the change).
if [ "$MODE" = silu_land ] && [ -f ab_old/activation.cu ]; then
  nvcc -std=c++20 -O3 -arch=sm_90 -Icommon -Icuda_kernels -c ab_old/activation.cu -o /tmp/activation_ab.o > "$OUT/tune_ab_build.log" 2>&1 & ab_pid=$!
fi
build
case "$MODE" in
  check)  tests; error_paths; sass; sanitizers; example; bench_quick ;;
  verify) tests; error_paths; sass; sanitizers ;;
  bench)  bench_sweep ;;
  final)  tests; bench_fp8 --quick; sass; sanitizers ;;
  tests)  tests ;;
  swiglu) bench_swiglu ;;
  decode) bench_decode --compile ${DECODE_ARGS:-} ;;
  norm_goals) bench_layernorm; pack
          step "RMSNorm at 1024 / 4096 rows, hidden 4096 / 8192 / 16384 (issue 3's never-slower points)"
          timeout 240 python3 benchmarks/bench_rms_norm.py --hidden 4096 8192 16384 --rows 1024 4096 --no-fused \
            --name bench_rms_goals 2>&1 | tee "$OUT/bench_rms_goals.log" | tail -30
          [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
  layernorm) tests_layernorm; bench_layernorm; sass; sanitizers ;;
  roofline) roofline ;;
  ln_roof) tests_layernorm; bench_layernorm; roofline ;;
  tune)   tests_norms; tune; bench_swiglu; bench_fp8 --quick; bench_layernorm ;;
  norms_explore) norms_explore ;;
  probe_silu) probe_silu ;;
  probe_silu_src) probe_silu_src ;;
  split2) tests_norms; pack; sanitize rms --only-rmsnorm; pack
          step "build tune_norms"
          tune_build_par || exit 1
          step "compute-sanitizer on every layout's output at odd rows of 16384 (--check-only)"
          export PATH="$PATH:/usr/local/cuda/bin"
          for tool in memcheck racecheck; do
            timeout 150 compute-sanitizer --tool $tool --print-limit 5 /tmp/tune_norms --check-only > "$OUT/split_$tool.log" 2>&1
            echo "$tool rc $?: $(tail -1 "$OUT/split_$tool.log")"; grep -c checked "$OUT/split_$tool.log"
          done
          grep -h "split.*MISMATCH" "$OUT"/split_*.log | sort | uniq | head -20
          step "the sweep: RMSNorm at 16384 from 1 to 256 rows, then the other shapes"
          timeout 200 /tmp/tune_norms --rows-sweep --only "$(echo {rms,rms+add}" bf16 "{1,16,32,64,128,256}x16384, "rms+add+fp8 fp16 "{1,16,32,64,128,256}x16384, | tr -d ' ' | sed 's/bf16/ bf16 /g; s/fp16/ fp16 /g; s/ ,/,/g')" > "$OUT/tune_rows.log" 2>&1 || status=1
          grep -v "^  " "$OUT/tune_rows.log"; pack
          timeout 240 /tmp/tune_norms --only "${SPLIT_SHAPES:-layer_norm fp16 1024x16384,layer_norm bf16 1024x16384,layer_norm bf16 512x16384,layer_norm bf16 2048x16384,layer_norm bf16 264x16384,rms+add bf16 4096x16384,rms+add+fp8dyn fp16 512x16384,rms+add+fp8dyn fp16 2048x16384}" > "$OUT/tune_norms.log" 2>&1 || status=1
          grep -v "^  " "$OUT/tune_norms.log"
          grep -E "split|exact" "$OUT/tune_norms.log" "$OUT/tune_rows.log" | head -150 ;;
  ln_pair) tests_layernorm; pack
          sanitize layernorm --only-layernorm; pack
          bench_layernorm; pack
          wait $tune_pid || { tail -5 "$OUT/tune_build.log"; status=1; }
          ln_check "$(printf 'layer_norm %s %sx16384,' bf16 1 fp16 3 bf16 3 bf16 133)"
          step "the sweep: bf16 hidden 16384 where two rows a cluster run, and either side"
          timeout 120 /tmp/tune_norms --only "$(printf 'layer_norm bf16 %sx16384,' 512 640 704 768 960 1024 2048)" \
            > "$OUT/tune_ln.log" 2>&1 || status=1
          grep -v "^  " "$OUT/tune_ln.log"; grep -E "split|exact" "$OUT/tune_ln.log" ;;
  ln_split) tests_layernorm; pack
          wait $tune_pid || { tail -5 "$OUT/tune_build.log"; status=1; }
          ln_sweep
          ln_check "$(printf 'layer_norm %s %sx16384,' fp16 1 bf16 3 fp16 133)"
          bench_layernorm; pack
          sanitize layernorm --only-layernorm ;;
  fp8_final) step "fp8 norm and activation tests"
          python3 -m pytest tests/test_rms_norm_fp8.py tests/test_activation.py -q -rfE -p no:cacheprovider 2>&1 \
            | tee "$OUT/pytest_fp8_act.log" | tail -4
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          bench_fp8; pack
          bench_swiglu; pack
          wait $tune_pid || { tail -5 "$OUT/tune_build.log"; status=1; }
          step "SwiGLU's shapes with its inputs in HBM (256 copies, as bench_swiglu.py)"
          timeout 100 /tmp/tune_norms --max-copies 256 --only "$(printf 'silu_and_mul_fp8 fp16 %sx13312,' 1 8 16)" \
            > "$OUT/silu_hbm.log" 2>&1 || status=1
          grep -v "^  " "$OUT/silu_hbm.log"; grep -E "^  " "$OUT/silu_hbm.log" | head -80 ;;
  swiglu_tier) step "activation tests"
          python3 -m pytest tests/test_activation.py -q -rfE -p no:cacheprovider 2>&1 \
            | tee "$OUT/pytest_activation.log" | tail -3; [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          bench_swiglu; pack
          wait $tune_pid || { tail -5 "$OUT/tune_build.log"; status=1; }
          step "SwiGLU's lean shapes from HBM (256 copies, as bench_swiglu.py), two rounds"
          for r in 1 2; do
            timeout 100 /tmp/tune_norms --max-copies 256 --only "$(printf 'silu_and_mul_fp8 fp16 %sx13312,' 4 8 16 32)silu_mul bf16 8x14336" \
              | grep -E "default|lean t(128|256) v(4|8) " || status=1
          done 2>&1 | tee "$OUT/silu_tier.log"; pack
          sanitize act --only-activations ;;
  silu_land) act_verify
          bins=norms
          if [ -n "${ab_pid:-}" ] && wait $ab_pid; then
            nvcc -arch=sm_90 /tmp/tune_main.o /tmp/rms_norm.o /tmp/layer_norm.o /tmp/activation_ab.o -o /tmp/tune_ab && bins="norms ab"
          fi
          step "SwiGLU's defaults, this tree against ab_old/activation.cu, 256 copies, ${ROUNDS:-2} rounds ($bins)"
          for r in $(seq "${ROUNDS:-2}"); do
            for b in $bins; do
              echo "--- $b, round $r"
              timeout 100 /tmp/tune_$b --defaults-only --max-copies 256 --only "$(printf 'silu_and_mul_fp8 fp16 %sx13312,' 1 8 32 128 512 2048)$(printf 'silu_mul bf16 %sx14336,' 1 128 1024)silu_mul bf16 4096x14336" || status=1
            done
          done 2>&1 | tee "$OUT/silu_ab.log" | grep -E "^---|default" ;;
  swiglu_lean) act_verify
          step "SwiGLU's default against the general kernel's and the lean 16-byte shapes, two rounds"
          for r in 1 2; do
            timeout 150 /tmp/tune_norms --only "$(printf 'silu_and_mul_fp8 fp16 %sx13312,' 192 256 384 512 1024 2048)$(printf 'silu_mul bf16 %sx14336,' 256 1024 4096)" \
              | grep -E "default|(silu|lean) t(128|256) v16" || status=1
          done 2>&1 | tee "$OUT/silu_lean.log" ;;
  # pair_verify (fortieth session): the LayerNorm fp16 pair past 2048 rows (landed untested in
  # s39f) and the RMSNorm pair (forced only, r2; removed in 96639ba after s40a) under the tests and sanitizers, then, if the
  # call has time left, the pair against the defaults at PAIR_SHAPES.
  pair_verify) tests_norms; pack
          sanitize layernorm --only-layernorm; pack
          sanitize rms --only-rmsnorm; pack
          wait $tune_pid || { tail -5 "$OUT/tune_build.log"; status=1; }
          layout_check fp8 "$(printf 'rms+add+fp8 fp16 %sx16384,rms fp16 %sx16384,rms+add bf16 %sx16384,' 1 1 1 3 3 3 133 133 133)"
          step "the pair's shapes, one round a time while the call has time ($SECONDS s so far)"
          for r in 1 2; do
            [ $SECONDS -lt 430 ] || { echo "skipped round $r at $SECONDS s"; continue; }
            timeout 120 /tmp/tune_norms --only "${PAIR_SHAPES:-$(printf 'rms+add+fp8 fp16 %sx16384,' 512 1024 2048)rms+add bf16 1024x16384,rms bf16 1024x16384}" || status=1
          done > "$OUT/pair_shapes.log" 2>&1
          grep -v "^  " "$OUT/pair_shapes.log"; grep -E "default|split.* r2|r2 " "$OUT/pair_shapes.log" | head -80 ;;
  # rms8192 (fortieth session): the split rows' new reach at hidden 8192 under the tests and
  # sanitizers, then against torch.compile and Liger there.
  rms8192) step "RMSNorm tests"
          python3 -m pytest tests/test_rms_norm.py tests/test_rms_norm_fp8.py -q -rfE -p no:cacheprovider 2>&1 \
            | tee "$OUT/pytest_rms.log" | tail -3; [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          sanitize rms --only-rmsnorm; pack
          step "add + RMSNorm + FP8 and RMSNorm + FP8, fp16, hidden 8192 ($SECONDS s so far)"
          [ $SECONDS -lt ${BENCH_BY:-280} ] && { timeout 80 python3 benchmarks/bench_norm_fp8.py --hidden 8192 --rows 1 8 1024 \
            --name bench_norm_fp8_8192 2>&1 | tee "$OUT/bench_norm_fp8_8192.log" | grep -vi warn | tail -16; }
          true ;;
  # bench8192: the RMSNorm family at hidden 8192 against torch.compile and Liger (the
  # fortieth session's rule, whose benchmarks did not run in s40c).
  # rows7: the skinny GEMM's convert 7 (M = 1, whole weight rows a block; forty-first session)
  rows7) step "skinny GEMM tests: convert 7, NaN and extremes, config errors"
          timeout 200 python3 -m pytest tests/test_skinny_gemm.py -q -rfE -p no:cacheprovider \
            -k "rows_path or nan_and_extremes or rejects_bad_config" 2>&1 | tee "$OUT/pytest_rows7.log" | tail -6
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          sanitize gemm_rows skinny_gemm_rows; pack
          step "convert 7 against the default at M = 1"
          timeout 280 python3 benchmarks/bench_skinny_gemm.py --paths --no-mlp --ms 1 --out "$OUT" \
            --shapes ${ROWS7_SHAPES:-2304x16384,13312x16384,16384x6656,4096x4096} \
            --path-names "${ROWS7_PATHS:-default,cvt7,cvt7 r1,cvt7 r4,cvt7 v1,cvt7 v2,cvt7 r1 v2,cvt7 f32,cvt7 r1 f32}" \
            2>&1 | tee "$OUT/bench_rows7.log" | grep -v "^ *$" | tail -40
          [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
  # rows_land: convert 7's persistent blocks (K 8-16 KB at M = 1): every skinny GEMM test, convert 7 and 8
  # under compute-sanitizer, the 11 weights at M = 1 (default, convert 7's one-shot blocks, convert 8)
  rows_land) tests_gemm; pack
          sanitize gemm_rows skinny_gemm_rows; pack
          step "M = 1 on the 11 weights: the default against convert 7's one-shot blocks (r2) and convert 8"
          timeout 300 python3 benchmarks/bench_skinny_gemm.py --paths --no-mlp --ms 1 --out "$OUT" \
            --shapes 2304x16384,13312x16384,16384x6656,6144x4096,4096x4096,28672x4096,4096x14336,1280x8192,1024x8192,7168x8192,8192x3584 \
            --path-names "default,cvt7 r2,cvt8" 2>&1 | tee "$OUT/bench_rows_land.log" | grep -v "^ *$" | tail -60
          [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
  # rows_final: convert 7 as the default at M = 1 (its rule in convert_for)
  rows_final) tests_gemm; pack
          step "M = 1 on the 11 weights: the default (convert 7 where its rule applies) against convert 6 and 7"
          timeout 300 python3 benchmarks/bench_skinny_gemm.py --paths --no-mlp --ms 1 --out "$OUT" \
            --shapes 2304x16384,13312x16384,16384x6656,6144x4096,4096x4096,28672x4096,4096x14336,1280x8192,1024x8192,7168x8192,8192x3584 \
            --path-names "default,cvt6,cvt7" 2>&1 | tee "$OUT/bench_rows_final.log" | grep -v "^ *$" | tail -60
          [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
  rows_verify) tests_gemm; pack; sanitize gemm_rows skinny_gemm_rows ;;
  # rows8: the skinny GEMM's convert 8 (M = 1, wgmma with whole weight rows a block; forty-second session)
  rows8_final) tests_gemm; pack
          step "the decode MLP at M = 1 (its GEMMs now convert 8 at 4 rows a block)"
          timeout 120 python3 benchmarks/bench_skinny_gemm.py --ms 1 --shapes 13312x16384,16384x6656 --out "$OUT" \
            --name bench_mlp_m1 2>&1 | tee "$OUT/bench_mlp_m1.log" | grep -v "^ *$" | tail -20
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack; ROWS8_TESTS=0 ;&
  rows8) [ "${ROWS8_TESTS:-1}" = 0 ] || { step "skinny GEMM tests: convert 8, NaN and extremes, config errors"
          timeout 200 python3 -m pytest tests/test_skinny_gemm.py -q -rfE -p no:cacheprovider \
            -k "rows_wgmma or nan_and_extremes or rejects_bad_config" 2>&1 | tee "$OUT/pytest_rows8.log" | tail -6
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack; }
          step "convert 8 against the default (7 or 6) at M = 1"
          timeout 280 python3 benchmarks/bench_skinny_gemm.py --paths --no-mlp --ms 1 --out "$OUT" \
            --shapes ${ROWS8_SHAPES:-2304x16384,13312x16384,16384x6656,6144x4096,4096x4096,28672x4096,4096x14336,1280x8192,1024x8192,7168x8192,8192x3584,2304x16384} \
            --path-names "${ROWS8_PATHS:-default,cvt6,cvt7,cvt8,cvt8 r4,cvt8 g2,cvt8 r4 g2}" \
            2>&1 | tee "$OUT/bench_rows8.log" | grep -v "^ *$" | tail -60
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          [ $SECONDS -lt ${SANITIZE_BY:-420} ] && sanitize gemm_rows skinny_gemm_rows
          true ;;
  x_once|x_once_final) tune_build_par > "$OUT/tune_build.log" 2>&1 & tune_pid=$!
          step "RMSNorm and LayerNorm tests"
          python3 -m pytest tests/test_rms_norm.py tests/test_rms_norm_fp8.py tests/test_layer_norm.py -q -rfE \
            -p no:cacheprovider 2>&1 | tee "$OUT/pytest_norms.log" | tail -3
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          if [ "$MODE" = x_once_final ]; then
            sanitize ln --only-layernorm; pack
            [ $SECONDS -lt 250 ] && { XONCE_ROUNDS=2 x_once_ab; pack; }
            [ $SECONDS -lt 250 ] && sanitize rms --only-rmsnorm
          else
            x_once_ab; pack
            [ "${XONCE_BENCH:-0}" = 1 ] && { bench_layernorm; pack; }
            [ $SECONDS -lt 400 ] && { sanitize ln --only-layernorm; pack; }
            [ $SECONDS -lt 440 ] && sanitize rms --only-rmsnorm
          fi
          true ;;
  ln_words) tests_layernorm; pack
          sanitize ln --only-layernorm; pack
          bench_layernorm; pack
          step "RMSNorm and add + RMSNorm, bf16, hidden 4096 (since s43's x without L1)"
          timeout 200 python3 benchmarks/bench_rms_norm.py --hidden 4096 --rows 1 16 256 1024 4096 \
            --fused-rows 1 256 4096 --name bench_rms_4096 2>&1 | tee "$OUT/bench_rms_4096.log" | tail -30
          [ "${PIPESTATUS[0]}" = 0 ] || status=1
          true ;;
  bench8192) step "add + RMSNorm + FP8 and RMSNorm + FP8, fp16, hidden 8192"
          timeout 200 python3 benchmarks/bench_norm_fp8.py --hidden 8192 --rows 1 8 32 128 512 1024 2048 \
            --name bench_norm_fp8_8192 2>&1 | tee "$OUT/bench_norm_fp8_8192.log" | grep -vi warn | tail -24
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          step "RMSNorm and add + RMSNorm, bf16, hidden 8192"
          timeout 240 python3 benchmarks/bench_rms_norm.py --hidden 8192 --rows 1 16 128 512 768 1024 4096 \
            --fused-rows 1 16 128 384 512 768 1024 4096 --name bench_rms_8192 2>&1 | tee "$OUT/bench_rms_8192.log" | grep -vi warn | tail -30
          [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
  fp8_verify) sanitize rms --only-rmsnorm; pack
          sanitize act --only-activations; pack
          wait $tune_pid || { tail -5 "$OUT/tune_build.log"; status=1; }
          layout_check fp8 "$(printf 'rms+add+fp8 fp16 %sx16384,rms+fp8dyn fp16 %sx16384,' 1 1 3 3 133 133)"
          step "SwiGLU at 8 rows with its inputs in HBM, three rounds (s36b: lean t256 v8 1.84 against the default's 1.94 us)"
          for r in 1 2 3; do
            timeout 60 /tmp/tune_norms --max-copies 256 --only "silu_and_mul_fp8 fp16 8x13312,silu_and_mul_fp8 fp16 4x13312" \
              | grep -E "default|lean t(128|256) v(4|8) " || status=1
          done 2>&1 | tee "$OUT/silu_hbm_ab.log" ;;
  split_final) tests_norms; pack
          step "k-quant CUDA tests (the build compiled q4k_torch.cpp's K-limit check)"
          python3 -m pytest tests/test_q4k_cuda.py -q -p no:cacheprovider 2>&1 | tail -2; pack
          sanitize rms --only-rmsnorm; pack
          bench_fp8; pack
          step "RMSNorm and add + RMSNorm, bf16, hidden 16384"
          timeout 240 python3 benchmarks/bench_rms_norm.py --hidden 16384 --rows 1 16 128 1024 4096 \
            --fused-rows 1 16 128 1024 4096 --name bench_rms_16384 2>&1 | tee "$OUT/bench_rms_16384.log" | tail -30
          [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
  split8192) tune_build_par > "$OUT/tune_build.log" 2>&1 & tune_pid=$!
          step "RMSNorm tests"
          python3 -m pytest tests/test_rms_norm.py tests/test_rms_norm_fp8.py -q -rfE -p no:cacheprovider 2>&1 | tail -2
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          sanitize rms --only-rmsnorm; pack
          wait $tune_pid || { tail -5 "$OUT/tune_build.log"; status=1; }
          step "the sweep at hidden 8192"
          timeout 150 /tmp/tune_norms --only "rms bf16 1x8192,rms bf16 16x8192,rms bf16 256x8192,rms bf16 4096x8192,rms+add bf16 1x8192,rms+add bf16 256x8192,rms+add bf16 4096x8192" \
            > "$OUT/tune_norms.log" 2>&1 || status=1
          grep -v "^  " "$OUT/tune_norms.log"; grep -E "split|exact" "$OUT/tune_norms.log"; pack
          step "RMSNorm and add + RMSNorm, bf16, hidden 8192"
          timeout 150 python3 benchmarks/bench_rms_norm.py --hidden 8192 --rows 1 16 256 1024 4096 \
            --fused-rows 1 16 256 1024 4096 --name bench_rms_8192 2>&1 | tee "$OUT/bench_rms_8192.log" | grep -E "^ *[0-9]+ " 
          [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
  q4k_tests) tests_q4k ;;
  q4k_m1) tests_q4k; q4k_imma_probe; bench_q4k --quick --dtype fp16; bench_q4k --quick; sanitizers_q4k ;;
  q4k_src) profile_q4k_tiled ;;
  read_floor) read_floor ;;
  q4k_decode) step "Q4_K_M decode, a step captured in a CUDA graph, 8 layers"
          timeout 210 python3 benchmarks/bench_q4k_decode.py --layers 8 --compile --profile 2>&1 \
            | grep -vi warn | tail -24
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          step "the same, 16 layers (the per-layer slope)"
          timeout 200 python3 benchmarks/bench_q4k_decode.py --layers 16 --compile \
            --name bench_q4k_decode_16 2>&1 | grep -vi warn | tail -12
          [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
  gemm_ring) tests_gemm; pack; step "convert 5 against the default and _scaled_mm"
          timeout 420 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --tune --no-mlp --ms 1,8,16,32 \
            --shapes 2304x16384,13312x16384,16384x6656,6144x4096,4096x4096,28672x4096,4096x14336,1280x8192,1024x8192,7168x8192,8192x3584 \
            --configs "0,0,0,5;0,3,0,5;0,4,8,5" --name bench_gemm_ring 2>&1 | tee "$OUT/bench_gemm_ring.log" | grep -E "^\||tune:" | head -300 ;;
  gemm_ring_sweep) [ "${RING_TESTS:-0}" = 1 ] && { tests_gemm; pack; }
          step "convert 5 at every cluster (K split) and ring depth, M ${RING_MS:=1,16,32}"
          cfgs=""; for sl in 3 4; do for nc in 1 2 3 4 5 6 7 8; do cfgs="$cfgs${cfgs:+;}0,$sl,$nc,5"; done; done
          timeout 500 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --tune --no-mlp --ms "$RING_MS" \
            --shapes 2304x16384,13312x16384,16384x6656,6144x4096,4096x4096,28672x4096,4096x14336,1280x8192,1024x8192,7168x8192,8192x3584 \
            --configs "$cfgs" --name bench_gemm_ring_sweep > "$OUT/bench_gemm_ring_sweep.log" 2>&1; echo "rc $?" ;;
  gemm_ring_ab) tests_gemm; pack
          step "the defaults before convert 5 (IK_SKINNY_GEMM_RING=0) against convert 5 and _scaled_mm"
          IK_SKINNY_GEMM_RING=0 timeout 200 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --tune --no-mlp \
            --ms 1,8,16,17,24,32 --configs "0,0,0,5" --name bench_gemm_ring_ab \
            --shapes 2304x16384,13312x16384,16384x6656,6144x4096,4096x4096,28672x4096,4096x14336,1280x8192,1024x8192,7168x8192,8192x3584 \
            > "$OUT/bench_gemm_ring_ab.log" 2>&1; echo "rc $?"; pack
          bench_gemm --ms 1,8,16,17,24,32 --name bench_gemm_final > /dev/null; echo "rc $?" ;;
  gemm_verify) tests_gemm; pack; sanitizers_gemm ;;
  tma_pkg) step "skinny GEMM tests: convert 6 and the config errors"
          python3 -m pytest tests/test_skinny_gemm.py -q -rfE -p no:cacheprovider -k "tma or bad_config or nan_and_extremes" \
            2>&1 | tee "$OUT/pytest_tma.log" | tail -6; pack
          step "--tune: convert 6 against the default and _scaled_mm"
          timeout 420 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --tune --configs "${TMA_CONFIGS:-0,0,0,6}" --name tune_tma \
            --shapes "${TMA_SHAPES:-2304x16384,13312x16384,16384x6656,6144x4096,4096x4096,28672x4096,4096x14336,1280x8192,1024x8192,7168x8192,8192x3584}" \
            --ms "${TMA_MS:-1,8,16,32}" 2>&1 | tee "$OUT/tune_tma.log" | grep -E "^tune|auto|, 6\]|_scaled_mm" ;;
  gemm_tma_verify) tests_gemm; pack
          sanitizers_gemm; pack
          step "compute-sanitizer (gemm, synccheck)"
          PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 240 compute-sanitizer --tool synccheck --error-exitcode 9 \
            python3 scripts/sanitize_cuda.py skinny_gemm > "$OUT/sanitizer_gemm_synccheck.log" 2>&1
          rc=$?; tail -3 "$OUT/sanitizer_gemm_synccheck.log"; echo "synccheck exit $rc"; [ $rc = 0 ] || status=1 ;;
  silu_final) step "activation tests"
          python3 -m pytest tests/test_activation.py -q -rfE -p no:cacheprovider 2>&1 \
            | tee "$OUT/pytest_activation.log" | tail -3; [ "${PIPESTATUS[0]}" = 0 ] || status=1
          sanitize activations --only-activations; pack
          bench_swiglu; pack
          tests_gemm; pack
          bench_gemm ;;
  gemm_tma_bench) bench_gemm ;;
  gemm_tma_final) tests_gemm; pack; bench_gemm ;;
  swap_final) tests_gemm; pack
          sanitizers_gemm3
          step "--tune at M 16 / 32: two consumer warpgroups (swapped at a split of 2, direct, by element at 4), one at a split of 4"
          timeout 120 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --tune --configs "2,5,2,6;2,3,1,6;2,1,4,6;0,1,4,6" \
            --name tune_m32 --shapes 4096x4096,28672x4096,4096x14336 --ms 16,32 2>&1 | tee "$OUT/tune_m32.log" \
            | grep -E "^tune|auto|, 6\]|_scaled_mm"
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          bench_gemm ;;
  tma_epi_ab|gemm_epi_final) tests_gemm; pack
          if [ "$MODE" = tma_epi_ab ]; then
            step "--tune: convert 6's epilogues: partials by element (1), by weight row (2), direct (3)"
            timeout 240 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --tune --configs "${EPI_CONFIGS:-0,1,0,6;0,2,0,6;0,3,0,6}" --name tune_epi \
              --shapes 2304x16384,13312x16384,16384x6656,6144x4096,4096x4096,28672x4096,4096x14336,1280x8192,1024x8192,7168x8192,8192x3584 \
              --ms "${EPI_MS:-1,8,16,32}" 2>&1 | tee "$OUT/tune_epi.log" | grep -E "^tune|auto|, 6\]|_scaled_mm"; pack
          fi
          sanitizers_gemm3
          if [ "$MODE" = gemm_epi_final ]; then bench_gemm; fi ;;
  act_src) step "activation tests"
          python3 -m pytest tests/test_activation.py -q -rfE -p no:cacheprovider 2>&1 \
            | tee "$OUT/pytest_activation.log" | tail -3; [ "${PIPESTATUS[0]}" = 0 ] || status=1
          pack
          IFS=';' read -ra cases <<< "${TMA_SRC_CASES:-4096 4096 32;4096 4096 1;28672 4096 32}"
          for c in "${cases[@]}"; do
            read -r n k m <<< "$c"
            step "Nsight Compute source page: convert 6 at $n x $k, M $m"
            ncu_src "ncu_tma_src_${n}x${k}_m$m" regex:skinny_gemm_tma python3 benchmarks/profile_gemm.py ours $n $k $m
            pack
          done ;;
  tma_src) IFS=';' read -ra cases <<< "${TMA_SRC_CASES:-28672 4096 1;28672 4096 32}"
          for c in "${cases[@]}"; do
            read -r n k m <<< "$c"
            step "Nsight Compute source page: convert 6 at $n x $k, M $m"
            ncu_src "ncu_tma_src_${n}x${k}_m$m" regex:skinny_gemm_tma python3 benchmarks/profile_gemm.py ours $n $k $m
          done ;;
  tma_ncu) export PATH="$PATH:/usr/local/cuda/bin"
          IFS=';' read -ra cases <<< "${TMA_NCU_CASES:-4096 4096 1;4096 4096 32;13312 16384 1;13312 16384 32}"
          for c in "${cases[@]}"; do
            read -r n k m <<< "$c"
            for impl in ours scaled_mm; do
              step "Nsight Compute: $impl at $n x $k, M $m (ours: convert 6, the default)"
              timeout 120 ncu --profile-from-start off --clock-control none --launch-skip 2 --launch-count 1 \
                --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
                --section Occupancy python3 benchmarks/profile_gemm.py $impl $n $k $m 2>&1 | grep -vE "^==PROF==|^\s*$" \
                | tee "$OUT/tma_ncu_${impl}_${n}x${k}_m$m.txt" \
                | grep -E "Duration|Throughput|Busy|Stall|Warp Cycles|Registers|Shared Memory|Waves|Block Limit|Achieved|Grid|Cluster|Function|skinny|nvjet" | head -40
            done
          done ;;
  ring_big) step "skinny GEMM tests: convert 5's rule"
          python3 -m pytest tests/test_skinny_gemm.py -q -k "ring" -p no:cacheprovider 2>&1 | tail -3
          for r in 0 1; do
            step "13312 x 16384 and the decode MLP, IK_SKINNY_GEMM_RING=$r"
            IK_SKINNY_GEMM_RING=$r timeout 140 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" \
              --shapes 13312x16384,16384x6656 --ms 16,17,32 --name "bench_gemm_mlp_ring$r" 2>&1 | grep -E "^ +(16|17|32) "
          done ;;
  chain_state) step "why the down projection is slower after convert 5 (profile_mlp_chain.py --state)"
          timeout 300 python3 benchmarks/profile_mlp_chain.py --state ${STATE_MS:-17 32} 2>&1 | tee "$OUT/chain_state.log" ;;
  chain_ncu) export PATH="$PATH:/usr/local/cuda/bin"
          for cv in 0 5; do
            step "Nsight Compute: gate_up at convert $cv (0: default) then the down GEMM, M 17"
            timeout 200 ncu --clock-control none --cache-control none --kernel-name regex:skinny_gemm --launch-skip 8 \
              --launch-count 4 --metrics gpu__time_duration.sum,launch__shared_mem_config_size,launch__shared_mem_per_block_dynamic,launch__shared_mem_per_block_static,launch__grid_size,launch__block_size,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers,launch__waves_per_multiprocessor,l1tex__t_sector_hit_rate.pct,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,sm__cycles_elapsed.avg.per_second \
              python3 benchmarks/profile_mlp_chain.py --pair $cv 17 2>&1 | grep -vE "^==PROF==|^\s*$" | tee "$OUT/chain_ncu_$cv.txt"
          done ;;
  gemm_chain) step "the decode MLP's kernels, convert 5 off and on (torch.profiler)"
          timeout 200 python3 benchmarks/profile_mlp_chain.py 17 32 2>&1 | tee "$OUT/profile_mlp_chain.log" | grep -vE "^ +0\.[0-9]+ us" ;;
  gemm_mlp_ab) for r in 0a 1a 0b 1b; do
            step "13312 x 16384 and the decode MLP, IK_SKINNY_GEMM_RING=${r:0:1}"
            IK_SKINNY_GEMM_RING=${r:0:1} timeout 140 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" \
              --shapes 13312x16384 --ms 16,17,32 --name "bench_gemm_mlp_ring$r" 2>&1 | grep -E "^ +(16|17|32) " ; pack
          done ;;
  q4k_decode_clean) step "Q4_K_M decode, 8 layers, no profiler in the process"
          timeout 240 python3 benchmarks/bench_q4k_decode.py --layers 8 --compile --name bench_q4k_decode_clean \
            --only "unquantised,q4km,stacked,stacked+k,unquantised compiled,q4km compiled,stacked compiled" \
            2>&1 | grep -vi warn | tail -14
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          step "the same at 32 layers, Q4_K_M only"
          timeout 300 python3 benchmarks/bench_q4k_decode.py --layers 32 --compile --name bench_q4k_decode_32 \
            --only "q4km,stacked+k,q4km compiled,stacked compiled" 2>&1 | grep -vi warn | tail -12
          [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
  q4k_decode_compiled) step "Q4_K_M decode, 8 layers, compiled, no profiler in the process"
          timeout 200 python3 benchmarks/bench_q4k_decode.py --layers 8 --compile --name bench_q4k_decode_compiled \
            --only "q4km compiled,stacked compiled" 2>&1 | grep -vi warn | tail -10
          [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
  # q4k_kscale: the tiled Q4_K gemv at M = 1 over K at N = 14336 (the same K split, 2 warps a
  # tile: time = a fixed part + K / 256 / 2 blocks a warp), fp16 and bf16 x, ours alone
  q4k_kscale) for dt in fp16 bf16; do
            bench_q4k --formats Q4_K --dtype $dt --ours-only --ms 1 --name bench_q4k_kscale_$dt \
              --shapes ${KSCALE_SHAPES:-14336x2048,14336x4096,14336x6144,14336x8192,14336x12288,14336x16384}; pack
          done; read_floor ;;
  # q4k_land: the m = 1 Q4_K kernels with two-MMA sub-block sums (XSUM, forty-eighth session; the A/B
  # was s48a's q4k_xsum at 3cd65b0): k-quant tests, sanitizers, the benchmark at M = 1 (fp16, bf16;
  # tokens/s), the decode layer's chain of kernels (bf16, fp16)
  q4k_land) tests_q4k; pack; sanitizers_q4k; pack
          for dt in fp16 bf16; do bench_q4k --dtype $dt --ms 1 --name bench_q4k_${dt}_m1; pack; done
          for dt in bf16 fp16; do
            step "decode layer, $dt"
            timeout 120 python3 benchmarks/bench_q4k_layer.py --dtype $dt --name bench_q4k_layer_$dt 2>&1 | tail -14
            [ "${PIPESTATUS[0]}" = 0 ] || status=1
          done ;;
  q4k_m1to8) bench_q4k --formats Q4_K --dtype fp16 --name bench_q4k_fp16_m1to8; pack
          bench_q4k --formats Q4_K --name bench_q4k_bf16_m1to8 ;;
  q4k_layer_once) for dt in bf16 fp16; do
            step "decode layer, $dt"
            timeout 120 python3 benchmarks/bench_q4k_layer.py --dtype $dt --name bench_q4k_layer_$dt 2>&1 | tail -14
            [ "${PIPESTATUS[0]}" = 0 ] || status=1
          done ;;
  packed_ab|packed_layer) t0=$SECONDS; left() { [ $((SECONDS - t0)) -lt "$1" ]; }
          if [ "$MODE" = packed_layer ]; then
            for dt in bf16 fp16; do
              step "decode layer, $dt"
              timeout 150 python3 benchmarks/bench_q4k_layer.py --dtype $dt --name bench_q4k_layer_$dt 2>&1 | tail -14
              [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
            done
          else
            step "norm and activation tests"
            python3 -m pytest tests/test_rms_norm.py tests/test_rms_norm_fp8.py tests/test_activation.py -q -rfE \
              -p no:cacheprovider 2>&1 | tee "$OUT/pytest_norms_act.log" | tail -6
            [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          fi
          wait $tune_pid || { tail -5 "$OUT/tune_build.log"; status=1; }
          wait $old_pid || { tail -5 "$OUT/tune_build_old.log"; status=1; }
          nvcc -arch=sm_90 /tmp/tune_main.o /tmp/rms_norm_old.o /tmp/layer_norm.o /tmp/activation_old.o -o /tmp/tune_old || status=1
          shapes="${PACKED_SHAPES:-rms bf16 1x4096,rms bf16 256x4096,rms bf16 1024x4096,rms bf16 4096x4096,rms fp16 4096x4096,rms+add bf16 1x4096,rms+add bf16 256x4096,rms+add bf16 4096x4096,rms bf16 1x16384,rms bf16 1024x16384,rms bf16 4096x8192,rms+add+fp8 fp16 1x16384,rms+add+fp8 fp16 128x16384,rms+add+fp8 fp16 512x16384,rms+add+fp8 fp16 2048x16384,silu_and_mul_fp8 fp16 1x13312,silu_and_mul_fp8 fp16 8x13312,silu_and_mul_fp8 fp16 32x13312,silu_and_mul_fp8 fp16 128x13312,silu_and_mul_fp8 fp16 512x13312,silu_and_mul_fp8 fp16 2048x13312,silu_mul bf16 1x14336,silu_mul bf16 128x14336,silu_mul bf16 1024x14336,silu_mul bf16 4096x14336}"
          step "defaults, before (old) and after (norms) in turn, 256 copies at most, 3 rounds"
          for r in $(seq "${PACKED_ROUNDS:-3}"); do
            for b in old norms; do
              echo "--- $b, round $r"; timeout 90 /tmp/tune_$b --defaults-only --max-copies 256 --only "$shapes" | grep -v "^copy\|^empty" || status=1
            done
          done 2>&1 | tee "$OUT/packed_ab.log"; pack
          if [ "$MODE" = packed_ab ]; then
            step "every layout's output against the default (--check-only)"
            timeout 120 /tmp/tune_norms --check-only > "$OUT/check_only.log" 2>&1 || status=1
            tail -2 "$OUT/check_only.log"; grep -c checked "$OUT/check_only.log"; grep MISMATCH "$OUT/check_only.log" | head; pack
          fi
          left 330 && { bench_swiglu; pack; }
          left 390 && { bench_fp8 --quick; pack; }
          left 430 && { step "RMSNorm benchmark, hidden 4096"
            timeout 120 python3 benchmarks/bench_rms_norm.py --hidden 4096 --rows 1 16 256 1024 4096 --fused-rows 1 256 4096 \
              --name bench_rms_4096 2>&1 | tail -22; pack; }
          [ "$MODE" = packed_ab ] && left 470 && { sanitize act --only-activations; pack; }
          [ "$MODE" = packed_ab ] && left 520 && { sanitize rms --only-rmsnorm; pack; } ;;
  q4k_layer) for run in a b; do
            for dt in bf16 fp16; do
              step "decode layer, $dt, run $run"
              timeout 120 python3 benchmarks/bench_q4k_layer.py --dtype $dt --name bench_q4k_layer_$dt$run 2>&1 | tail -10
              [ "${PIPESTATUS[0]}" = 0 ] || status=1
            done
          done ;;
  probe_ln) probe_ln ;;
  tp)     tp_decode ;;
  q4k)    tests_q4k; bench_q4k; sass_q4k; sanitizers_q4k ;;
  q4k_prof) profile_q4k ;;
  gpu_tests) tests_gpu; sanitizers_gemm ;;
  cuda_tests) tests_gpu ;;
  recheck) tests_gpu; bench_q4k --quick; sanitizers_q4k; sanitizers_gemm ;;
  q4k_final) tests_q4k; for i in 1 2; do python3 -m pytest tests/test_q4k_cuda.py -q -rfE -p no:cacheprovider 2>&1 | tail -4; done
             bench_q4k; sass_q4k; sanitizers_q4k; profile_q4k ;;
  gemm)   tests_gemm; bench_gemm; sass_gemm; sanitizers_gemm ;;
  final1) tests_gpu; tp_decode; bench_gemm; bench_q4k --quick ;;
  final2) bench_fp8; bench_swiglu; bench_layernorm; bench_quick; sass; sass_q4k; sass_gemm; sanitizers ;;
  gemm_tune) bench_gemm --tune ;;
  gemm_prof) profile_gemm ;;
  gemm_new) tests_gemm; bench_gemm --quick; bench_gemm --paths --name bench_gemm_paths; sass_gemm; sass_mix_gemm
            sanitizers_gemm ;;
  all)    tests; error_paths; sass; sanitizers; example; bench_sweep ;;
  dyn_split) tests_rms
          wait $tune_pid || { tail -5 "$OUT/tune_build.log"; status=1; }
          step "every layout's output against the default (--check-only)"
          timeout 120 /tmp/tune_norms --check-only > "$OUT/check_only.log" 2>&1 || status=1
          grep -c checked "$OUT/check_only.log"; grep MISMATCH "$OUT/check_only.log" | grep -v layer_norm | head; pack
          d=""; for r in 1 2 4 8 16 32 48 64 96 128 256 512 1024 2048; do d="$d,rms+add+fp8dyn fp16 ${r}x16384"; done
          for r in 1 8 32 128; do d="$d,rms+fp8dyn fp16 ${r}x16384,rms+fp8dyn fp16 ${r}x8192"; done
          for r in 1 8 32 64 128 256 1024; do d="$d,rms+add+fp8dyn fp16 ${r}x8192"; done
          d="${d#,},rms+add+fp8dyn bf16 1x16384,rms+add+fp8dyn bf16 32x16384"
          step "the dynamic scale's layouts (tune_norms --only)"
          timeout 200 /tmp/tune_norms --only "$d" 2>&1 | grep -v "^copy\|^empty" | tee "$OUT/dyn_sweep.log" | grep -v "^  "; pack
          bench_fp8; pack
          sanitize rms --only-rmsnorm; pack ;;
  rows2)  tests_gemm; pack
          for r in ${ROWS2_PASSES:-a b}; do
            step "convert 7 at M 1-2 beside the default and convert 6, pass $r"
            timeout 240 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --paths --ms 1,2 --path-names default,cvt7,cvt6 \
              --shapes "${ROWS2_SHAPES:-2304x16384,13312x16384,16384x6656,6144x4096,4096x4096,28672x4096,4096x14336,1280x8192,1024x8192,7168x8192,8192x3584}" \
              --name bench_gemm_rows2$r 2>&1 | grep -E "^#|^\| *[12] "
            [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          done
          sanitize gemm_rows skinny_gemm_rows ;;
  dyn_final) tests_rms
          bench_fp8; pack; sanitize rms --only-rmsnorm; pack ;;
  pdl)    step "programmatic dependent launch: its tests, the GEMM graph tests"
          python3 -m pytest tests/test_pdl.py tests/test_skinny_gemm.py -k "cuda and (pdl or graph or chain or written or writes or into)" \
            -q -rfE -p no:cacheprovider 2>&1 | tee "$OUT/pytest_pdl.log" | tail -8
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          for r in ${PDL_PASSES:-a b}; do
            step "the decode MLP with and without the dependent launches, pass $r"
            timeout 200 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --mlp-only --ms ${PDL_MS:-1,2,8,32} \
              --name bench_mlp_pdl$r 2>&1 | tail -9
            step "one GEMM after another, with and without, pass $r"
            timeout 200 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --paths --ms 1,2,8 --path-names "default,no PDL" \
              --shapes "${PDL_SHAPES:-2304x16384,4096x4096,1024x8192,16384x6656,28672x4096}" \
              --name bench_gemm_pdl$r 2>&1 | tail -40
            for v in 1 0; do
              step "the Q4_K decode layer, fp16, IK_PDL=$v, pass $r"
              IK_PDL=$v timeout 120 python3 benchmarks/bench_q4k_layer.py --dtype fp16 --name bench_q4k_layer_pdl$v$r 2>&1 | tail -14
            done; pack
          done
          sanitize gemm_rows skinny_gemm_rows; pack ;;
  pdl_final) step "the dependent launches as landed: their tests, the skinny GEMM tests"
          python3 -m pytest tests/test_pdl.py tests/test_skinny_gemm.py -k cuda -q -rfE -p no:cacheprovider 2>&1 \
            | tee "$OUT/pytest_pdl.log" | tail -4
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          step "one GEMM after another, with and without"
          timeout 100 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --paths --ms 1,2,8 --path-names "default,no PDL" \
            --shapes 2304x16384,4096x4096 --name bench_gemm_pdl_final 2>&1 | tail -2; pack
          step "the decode MLP as landed (its GEMMs plain), with and without"
          timeout 120 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --mlp-only --ms 1,8,32 \
            --name bench_mlp_pdl_final 2>&1 | tail -7; pack ;;
  s57)    t0=$SECONDS; left() { [ $((SECONDS - t0)) -lt "$1" ]; }
          step "the dependent launches as landed: their tests, the skinny GEMM tests"
          python3 -m pytest tests/test_pdl.py tests/test_skinny_gemm.py -k cuda -q -rfE -p no:cacheprovider 2>&1 \
            | tee "$OUT/pytest_pdl.log" | tail -4
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          bench_q4k --dtype fp16 --ms 1 --name bench_q4k_pdl_fp16; pack
          for a in 0 2 64 2 64 0; do left 330 || break
            step "Q4_K tiled, fp16 x, IK_KQ_PREFETCH=$a"
            IK_KQ_PREFETCH=$a timeout 60 python3 benchmarks/bench_q4k.py --ours-only --formats Q4_K --dtype fp16 --ms 1 \
              --shapes 14336x4096,4096x14336,4096x4096 --name bench_q4k_ahead$a 2>&1 | grep -E "m=1|wrote" | tee -a "$OUT/ahead.log"
          done; pack
          left 400 && { step "one GEMM after another, with and without"
            timeout 100 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --paths --ms 1,2,8 --path-names "default,no PDL" \
              --shapes 2304x16384,4096x4096 --name bench_gemm_pdl_final 2>&1 | tail -2; pack; }
          left 470 && { bench_q4k --dtype bf16 --ms 1 --formats Q4_K --name bench_q4k_pdl_bf16; pack; } ;;
  s57b)   t0=$SECONDS; left() { [ $((SECONDS - t0)) -lt "$1" ]; }
          bench_layernorm; pack; bench_fp8; pack; left 380 && { bench_swiglu; pack; }
          left 430 && { step "RMSNorm, 1-4096 rows"; timeout 150 python3 benchmarks/bench_rms_norm.py --rows 1 8 512 4096 \
            --fused-rows 1 512 2>&1 | tee "$OUT/bench.log" | tail -30; pack; } ;;
  s57c)   t0=$SECONDS; left() { [ $((SECONDS - t0)) -lt "$1" ]; }
          for r in a b; do for a in 0 1 2 3 4; do left 300 || break
            for d in fp16 bf16; do
              step "Q4_K tiled, $d x, IK_KQ_PREFETCH=$a, pass $r"
              IK_KQ_PREFETCH=$a timeout 60 python3 benchmarks/bench_q4k.py --ours-only --formats Q4_K --dtype $d --ms 1 \
                --shapes 14336x4096,4096x14336,4096x4096 --name bench_q4k_ahead$a$d$r 2>&1 | grep -E "m=1" | tee -a "$OUT/ahead.log"
            done; done; done; pack
          for a in 0 2; do left 480 || break
            step "the Q4_K decode layer, fp16, IK_KQ_PREFETCH=$a"
            IK_KQ_PREFETCH=$a timeout 100 python3 benchmarks/bench_q4k_layer.py --dtype fp16 --name bench_q4k_layer_ahead$a 2>&1 | tail -14
          done; pack ;;
  s57d)   t0=$SECONDS; left() { [ $((SECONDS - t0)) -lt "$1" ]; }
          for r in a b; do for a in 0 1 2; do for d in fp16 bf16; do left 420 || break
            step "the Q4_K decode layer, $d, IK_KQ_PREFETCH=$a, pass $r"
            IK_KQ_PREFETCH=$a timeout 100 python3 benchmarks/bench_q4k_layer.py --dtype $d --name bench_q4k_layer_ahead$a$d$r 2>&1 \
              | grep -E "^ +(layer|gemvs|fused|the rest|q \+|qkv|gate)" | tee -a "$OUT/layer_ahead.log"
          done; done; done; pack ;;
  s57e)   t0=$SECONDS; left() { [ $((SECONDS - t0)) -lt "$1" ]; }
          export IK_KQ_PREFETCH=1
          bench_q4k --dtype fp16 --ms 1 --name bench_q4k_ahead1_fp16; pack
          bench_q4k --dtype bf16 --ms 1 --name bench_q4k_ahead1_bf16; pack
          left 300 && { step "the decode MLP as landed (its GEMMs plain), with and without"
            timeout 120 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --mlp-only --ms 1,8,32 \
              --name bench_mlp_pdl_final 2>&1 | tail -7; pack; }
          left 380 && { bench_q4k --dtype fp16 --ms 2,4,8 --formats Q4_K --ours-only --name bench_q4k_ahead1_m28; pack; } ;;
  s57f)   step "k-quant and dependent-launch tests"
          python3 -m pytest tests/test_pdl.py tests/test_q4k_cuda.py tests/test_q4k_tiled.py -k cuda -q -rfE -p no:cacheprovider 2>&1 \
            | tee "$OUT/pytest_kq.log" | tail -4
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          sanitize q4k --only-kquants; pack ;;
  s57g)   t0=$SECONDS; tests_gpu; pack
          [ $((SECONDS - t0)) -lt 200 ] && { sanitize gemm_rows skinny_gemm_rows; pack; } ;;
  s57h)   step "dependent-launch tests (IK_PDL 1, 2 and 0)"
          python3 -m pytest tests/test_pdl.py -q -rfE -p no:cacheprovider 2>&1 | tee "$OUT/pytest_pdl.log" | tail -3
          [ "${PIPESTATUS[0]}" = 0 ] || status=1; pack
          step "one GEMM after another: as chosen, plainly, every convert a dependent (no prefetch)"
          timeout 120 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --paths --ms 1,2,8,16 \
            --path-names "default,no PDL,all PDL" --shapes 2304x16384,4096x4096,16384x6656 --name bench_gemm_allpdl 2>&1 | tail -30; pack
          step "the decode MLP with every kernel a dependent (IK_PDL=2) against plainly"
          IK_PDL=2 timeout 100 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --mlp-only --ms 1,8,32 \
            --name bench_mlp_allpdl 2>&1 | tail -6; pack ;;
  pdl_h200) t0=$SECONDS; left() { [ $((SECONDS - t0)) -lt "$1" ]; }
          bench_q4k --dtype fp16 --ms 1 --name bench_q4k_fp16; pack
          bench_q4k --dtype bf16 --ms 1 --name bench_q4k_bf16; pack
          for d in fp16 bf16; do step "the Q4_K decode layer, $d, with and without"
            timeout 100 python3 benchmarks/bench_q4k_layer.py --dtype $d --name bench_q4k_layer_$d 2>&1 | tail -13; done; pack
          step "one GEMM after another at the goal shapes: as chosen, plainly, every convert a dependent"
          timeout 150 python3 benchmarks/bench_skinny_gemm.py --out "$OUT" --paths --ms 1,8,16,32 \
            --path-names "default,no PDL,all PDL" --shapes 2304x16384,13312x16384,16384x6656 --name bench_gemm_goal_pdl 2>&1 | tail -30; pack
          left 300 && { bench_layernorm; pack; }
          left 380 && { bench_fp8; pack; }
          left 430 && { bench_swiglu; pack; }
          left 470 && { step "RMSNorm at 4096 rows"; timeout 80 python3 benchmarks/bench_rms_norm.py --hidden 4096 8192 16384 \
            --rows 4096 --no-fused --name bench_rms_4096 2>&1 | tail -16; pack; } ;;
  kq_ahead) for a in 1 1@3 2@3 0; do  # the k-quant gemv's L2 prefetch: N blocks from each warp's F-th
            step "Q4_K tiled, fp16 x, IK_KQ_PREFETCH=$a"
            IK_KQ_PREFETCH=$a timeout 60 python3 benchmarks/bench_q4k.py --ours-only --formats Q4_K --dtype fp16 --ms 1 \
              --shapes 14336x4096,4096x14336,4096x4096 --name "bench_q4k_ahead${a/@/at}" 2>&1 | grep -E "m=1" | tee -a "$OUT/ahead.log"
            step "the Q4_K decode layer, fp16, IK_KQ_PREFETCH=$a"
            IK_KQ_PREFETCH=$a timeout 100 python3 benchmarks/bench_q4k_layer.py --dtype fp16 --name "bench_q4k_layer_ahead${a/@/at}" 2>&1 | tail -12
          done; pack ;;
  pdl_verify) t0=$SECONDS; tests_gpu; pack
          [ $((SECONDS - t0)) -lt 330 ] && { sanitize q4k --only-kquants; pack; }
          [ $((SECONDS - t0)) -lt 420 ] && { sanitize act --only-activations; pack; } ;;
  card1)  bench_gemm; pack; bench_layernorm; pack; bench_q4k --ms 1 --dtype fp16; pack ;;
  card2)  t0=$SECONDS; left() { [ $((SECONDS - t0)) -lt "$1" ]; }
          bench_sweep; pack; left 330 && { bench_fp8; pack; }; left 400 && { bench_swiglu; pack; }
          left 470 && { bench_q4k --ms 1 --dtype bf16; pack; } ;;
  *) echo "unknown mode $MODE"; exit 2 ;;
esac
echo "session status $status"
exit $status
