"""Metal shaders executed under the CPU emulation of MSL (tools/msl_harness/).

Not Apple's compiler, not an Apple GPU: the .metal sources are compiled unchanged (after
a pre-pass that blanks attributes and address spaces) as C++20 with g++ and clang++-19,
and their threadgroups run as fibers with real barrier and SIMD-group semantics. What
this checks: the shaders' indexing, edge handling, synchronisation and rounding.
"""

import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import loaded_backend
from reference import (assert_close, assert_close_dot, assert_silu_matches_cpu_op, layer_norm_ref, poisoned_like,
                       rms_norm_ref, silu_mul_ref, ulps_apart)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "msl_harness"))
import msl  # noqa: E402

SHADERS = ROOT / "metal_kernels"
TEST_SHADERS = Path(__file__).resolve().parent / "msl"
CXX = ["g++", "clang++-19"]
BUILT = [SHADERS / "matmul_tiled.metal", SHADERS / "matmul_simdgroup.metal",
         SHADERS / "rms_norm.metal", SHADERS / "activation.metal", SHADERS / "layer_norm.metal",
         SHADERS / "q4k.metal",
         TEST_SHADERS / "simd_ops.metal", TEST_SHADERS / "divergence.metal"]
# build.toml's `include` directories of the Metal kernels (Apple's compiler gets them as -I).
INCLUDES = [ROOT / "common"]


@pytest.fixture(scope="session")
def libs():
    """Every shader built with every compiler present, in parallel (cached on disk)."""
    present = [c for c in CXX if c in msl.compilers()]
    jobs = [(s, c) for s in BUILT for c in present]
    with ThreadPoolExecutor() as pool:
        list(pool.map(lambda j: msl.build(*j, includes=INCLUDES), jobs))
    return {(s.stem, c): msl.Library(s, c, includes=INCLUDES) for s, c in jobs}


@pytest.fixture(scope="session")
def cpu_ops(request):
    """The built package when it is the CPU variant (its CPU ops are the semantics the
    shaders must match), else None: the CUDA variant registers no CPU kernels."""
    return request.getfixturevalue("ik") if loaded_backend() == "cpu" else None


@pytest.fixture(params=CXX)
def cxx(request):
    if request.param not in msl.compilers():
        pytest.skip(f"{request.param} not installed (`make rocm-toolchain` installs clang-19)")
    return request.param


def line_of(path: Path, marker: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if marker in t)


def u32(v):
    return np.array([v], np.uint32)


def matmul(lib, A, B, suffix="f32", order=0):
    (M, K), N = A.shape, B.shape[1]
    C = np.full((M, N), np.nan, A.dtype)  # poisoned: every element must be written
    lib.dispatch(f"matmul_tiled_{suffix}", ((N + 15) // 16, (M + 15) // 16), (16, 16),
                 A, B, C, u32(M), u32(N), u32(K), order=order)
    return C


SIZES = [1, 17, 33, 65]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_matmul_tiled(libs, cxx, dtype):
    lib = libs["matmul_tiled", cxx]
    suffix = "f32" if dtype == np.float32 else "f16"
    rng = np.random.default_rng(torch.initial_seed())
    for M in SIZES:
        for N in SIZES:
            for K in SIZES:
                A = rng.standard_normal((M, K)).astype(dtype)
                B = rng.standard_normal((K, N)).astype(dtype)
                C = matmul(lib, A, B, suffix).astype(np.float64)
                ref = A.astype(np.float64) @ B.astype(np.float64)
                # fp32 accumulation; fp16 adds one rounding of the output.
                tol = (1e-5 if dtype == np.float32 else 1e-3) * (1 + np.abs(ref))
                assert np.isfinite(C).all(), f"unwritten elements at {M}x{N}x{K}"
                assert (np.abs(C - ref) <= tol * np.sqrt(K)).all(), f"{M}x{N}x{K}"


def test_matmul_simdgroup(libs, cxx):
    """simdgroup_float8x8 load / multiply_accumulate / store (multiples of 8 only)."""
    lib = libs["matmul_simdgroup", cxx]
    rng = np.random.default_rng(torch.initial_seed())
    for M, N, K in [(8, 8, 8), (24, 40, 16), (40, 8, 72)]:
        A = rng.standard_normal((M, K)).astype(np.float32)
        B = rng.standard_normal((K, N)).astype(np.float32)
        C = np.full((M, N), np.nan, np.float32)
        lib.dispatch("matmul_simdgroup_f32", (N // 8, M // 8), (32,), A, B, C,
                     u32(M), u32(N), u32(K))
        ref = A.astype(np.float64) @ B
        assert np.abs(C - ref).max() <= 1e-5 * np.sqrt(K) * (1 + np.abs(ref).max())


def test_matmul_thread_order_does_not_matter(libs, cxx):
    """The correct shader gives the same bits whichever thread runs ahead."""
    lib = libs["matmul_tiled", cxx]
    rng = np.random.default_rng(torch.initial_seed())
    A = rng.standard_normal((33, 65)).astype(np.float32)
    B = rng.standard_normal((65, 17)).astype(np.float32)
    runs = [matmul(lib, A, B, order=o) for o in (0, 1, 2)]
    assert all(np.array_equal(runs[0], r) for r in runs[1:])


def test_missing_barrier_is_caught(libs, cxx, tmp_path):
    """The tiled matmul without its second barrier (derived from the real shader, so the
    test follows it): threads that run ahead overwrite tiles others still read. The
    harness switches threads only at barriers, so the race gives a wrong result, in
    every thread order, whenever K spans more than one tile."""
    src = (SHADERS / "matmul_tiled.metal").read_text().splitlines(keepends=True)
    barriers = [i for i, t in enumerate(src) if "threadgroup_barrier(" in t]
    assert len(barriers) == 2
    del src[barriers[1]]
    broken = tmp_path / "matmul_tiled_no_second_barrier.metal"
    broken.write_text("".join(src))
    lib = msl.Library(broken, cxx, tmp_path)
    rng = np.random.default_rng(torch.initial_seed())
    for K in (33, 65):
        A = rng.standard_normal((17, K)).astype(np.float32)
        B = rng.standard_normal((K, 33)).astype(np.float32)
        ref = A.astype(np.float64) @ B
        good = matmul(libs["matmul_tiled", cxx], A, B)
        assert np.abs(good - ref).max() < 1e-4
        for order in (0, 1, 2):
            bad = matmul(lib, A, B, order=order)
            assert np.abs(bad - ref).max() > 1e-2, f"race not exposed (K={K}, order={order})"
    # One tile: the second barrier guards nothing, and the result is right.
    A = rng.standard_normal((17, 16)).astype(np.float32)
    B = rng.standard_normal((16, 33)).astype(np.float32)
    assert np.abs(matmul(lib, A, B) - A.astype(np.float64) @ B).max() < 1e-4


def test_unwritten_threadgroup_memory_reads_nan(libs, cxx, tmp_path):
    """Threadgroup memory starts as NaN in every threadgroup. The tiled matmul without
    the zero fill of A's tile: with K < 16 the slots past K stay unwritten, and NaN
    times B's zeros poisons every output (zero-initialised or stale memory would
    hide the missing fill: 0 * 0 and x * 0 are 0)."""
    src = (SHADERS / "matmul_tiled.metal").read_text()
    fill = "As[tid.y][tid.x] = (row < M && ka < K) ? A[row * K + ka] : T(0);"
    assert src.count(fill) == 1
    unfilled = tmp_path / "matmul_tiled_no_zero_fill.metal"
    unfill = "if (row < M && ka < K) As[tid.y][tid.x] = A[row * K + ka];"
    unfilled.write_text(src.replace(fill, unfill))
    lib = msl.Library(unfilled, cxx, tmp_path)
    rng = np.random.default_rng(torch.initial_seed())
    A = rng.standard_normal((17, 5)).astype(np.float32)
    B = rng.standard_normal((5, 17)).astype(np.float32)
    assert np.isnan(matmul(lib, A, B)).all()
    assert np.isfinite(matmul(libs["matmul_tiled", cxx], A, B)).all()


SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
NORM_CASES = pytest.mark.parametrize(
    "dtype,d", [(t, d) for t in SUFFIX for d in (1, 3, 127, 1000)])


def scalars(d, eps):
    return u32(d), np.float32([eps])


@NORM_CASES
def test_rms_norm(libs, cxx, dtype, d):
    rows, eps = 5, 1e-6
    for tg in (32, 96, 1024):  # full SIMD-groups, a partial threadgroup of rows, one row
        x, w = torch.randn(rows, d, dtype=dtype), torch.randn(d, dtype=dtype)
        out = poisoned_like(x)
        libs["rms_norm", cxx].dispatch(f"rms_norm_{SUFFIX[dtype]}", (rows,), (tg,), x, w, out,
                                       *scalars(d, eps))
        assert_close(out, rms_norm_ref(x, w, eps), dtype)


@NORM_CASES
def test_fused_add_rms_norm(libs, cxx, dtype, d):
    rows, eps = 3, 1e-5
    x, r = torch.randn(rows, d, dtype=dtype), torch.randn(rows, d, dtype=dtype)
    w = torch.randn(d, dtype=dtype)
    xs, rs = x.clone(), r.clone()
    libs["rms_norm", cxx].dispatch(f"fused_add_rms_norm_{SUFFIX[dtype]}", (rows,), (256,),
                                   xs, rs, w, *scalars(d, eps))
    s = x + r  # torch rounds the sum to the dtype, as the kernel must (bit-exact)
    assert torch.equal(rs, s)
    assert_close(xs, rms_norm_ref(s, w, eps), dtype)


def test_simd_collectives(libs, cxx):
    lib = libs["simd_ops", cxx]
    n = 64 + 20  # two full SIMD-groups and a partial one (lanes 20..31 inactive)
    rng = np.random.default_rng(torch.initial_seed())
    v = rng.standard_normal(n).astype(np.float32)
    out = np.full((n, 6), np.nan, np.float32)
    try:
        lib.dispatch("simd_ops", (n,), (n,), v, out, threads=True)
    except msl.DispatchError as e:  # the partial group's shuffles read inactive lanes
        assert "reads an inactive lane" in str(e) and "simd_ops.metal:" in str(e)
    n = 64
    v, out = v[:n].copy(), np.full((n, 6), np.nan, np.float32)
    lib.dispatch("simd_ops", (n,), (n,), v, out, threads=True)
    g = v.reshape(2, 32)
    lane = np.arange(32)
    want = np.stack([np.repeat(g.max(1), 32),
                     g[:, (lane + 5) % 32].ravel(), g[:, lane ^ 1].ravel(),
                     np.repeat(g[:, 3], 32), np.concatenate([g[:, 1:], g[:, -1:]], 1).ravel()], 1)
    np.testing.assert_allclose(out[:, 1:], want, rtol=1e-6, atol=1e-6)
    # The sums against fp64 within fp32 summation's bound (32 terms: 32 * 2^-24 * sum |v|),
    # not relative to the sum itself: random terms that cancel to near zero (a seed gave
    # 0.0219 from terms of about 1) differ from numpy's order by more than 1e-6 relative.
    assert_sums(out[:, 0], np.repeat(g.astype(np.float64).sum(1), 32), np.repeat(np.abs(g).sum(1), 32))
    v4 = rng.standard_normal((96, 4)).astype(np.float32)
    o4 = np.full_like(v4, np.nan)
    lib.dispatch("simd_sum4", (96,), (96,), v4, o4, threads=True)
    g4 = v4.reshape(3, 32, 4)
    assert_sums(o4, np.repeat(g4.astype(np.float64).sum(1), 32, 0), np.repeat(np.abs(g4).sum(1), 32, 0))


def assert_sums(out, exact, terms):
    """Sums of 32 fp32 terms (a SIMD-group's) against their fp64 value: within the worst
    case of recursive summation, 32 units of fp32 rounding of sum |terms|."""
    assert np.isfinite(out).all()
    excess = (np.abs(out.astype(np.float64) - exact) - 32 * 2.0**-24 * terms).max()
    assert excess <= 0, f"a sum is {excess:.3g} past its rounding budget"


def test_barrier_divergence_aborts(libs, cxx):
    lib = libs["divergence", cxx]
    src = TEST_SHADERS / "divergence.metal"
    out = np.zeros(32, np.float32)
    with pytest.raises(msl.DispatchError) as e:
        lib.dispatch("half_skip_barrier", (1,), (32,), out)
    line = line_of(src, "SKIPPED_BARRIER")
    assert f"divergence.metal:{line}:" in str(e.value)
    assert "reached by 16 of 32 threads" in str(e.value)
    with pytest.raises(msl.DispatchError) as e:
        lib.dispatch("two_barriers", (4,), (32,), out)
    for marker in ("EVEN_BARRIER", "ODD_BARRIER"):
        assert f"divergence.metal:{line_of(src, marker)}:" in str(e.value)
    with pytest.raises(msl.DispatchError) as e:
        lib.dispatch("split_simd_sum", (1,), (32,), out)
    assert "diverging call sites" in str(e.value)
    for marker in ("LOW_LANES", "HIGH_LANES"):
        assert f"divergence.metal:{line_of(src, marker)}:" in str(e.value)


def test_compile_error_points_into_the_metal_file(cxx):
    src = TEST_SHADERS / "syntax_error.metal"
    with pytest.raises(msl.CompileError) as e:
        msl.build(src, cxx)
    assert f"{src}:{line_of(src, 'SYNTAX_ERROR')}:" in str(e.value)


def test_prepass_keeps_lines_and_columns():
    src = (SHADERS / "rms_norm.metal").read_text()
    out, kernels = msl.prepass(src, "rms_norm.metal")
    # Same lines, same columns: only a poison call is appended after a threadgroup
    # declaration's `;`.
    unpoisoned = re.sub(r" MSL_TG_POISON\(\w+\);", "", out)
    assert [len(t) for t in unpoisoned.splitlines()] == [len(t) for t in src.splitlines()]
    assert [k.name for k in kernels] == [f"{op}_{t}" for op in ("rms_norm", "fused_add_rms_norm")
                                         for t in ("f32", "f16", "bf16")]
    assert kernels[1].call == "rms_norm<half>"  # a template kernel's instance
    assert kernels[0].bindings[:5] == [("buffer", i) for i in range(5)]
    assert "MSL_TGLOCAL float partials[32];" in out  # per-threadgroup storage
    assert "[[" not in out and "device const float*" not in out and "kernel void" not in out


def test_matmul_tiled_bf16(libs, cxx):
    lib = libs["matmul_tiled", cxx]
    for M, N, K in [(1, 1, 1), (17, 33, 65), (33, 17, 16)]:
        A, B = torch.randn(M, K).bfloat16(), torch.randn(K, N).bfloat16()
        C = poisoned_like(torch.empty(M, N, dtype=torch.bfloat16))
        lib.dispatch("matmul_tiled_bf16", ((N + 15) // 16, (M + 15) // 16), (16, 16),
                     A, B, C, u32(M), u32(N), u32(K))
        assert_close(C, A.double() @ B.double(), torch.bfloat16)


# ---- activation.metal: silu_mul, silu (and silu_and_mul: silu_mul on x's two halves)

ACT_CASES = pytest.mark.parametrize("dtype,d", [(t, d) for t in SUFFIX for d in (1, 3, 127, 1000)])


def act_input(shape, dtype):
    return (torch.randn(shape) * 3).to(dtype)  # both of silu's tails


def check_vs_hf(out, gate, up, dtype):
    """HF's rounding (F.silu in the dtype, times up): one ulp for fp16/bf16, as on the
    CPU; fp32 a few (torch's silu takes Sleef's expf, the harness the C library's)."""
    import torch.nn.functional as F
    ref = F.silu(gate) if up is None else F.silu(gate) * up
    limit = 6 if dtype == torch.float32 else 1
    assert ulps_apart(out, ref, dtype).max().item() <= limit


def silu_mul_dispatch(lib, sfx, out, gate, up, d, rows, strides, tg=64):
    lib.dispatch(f"silu_mul_{sfx}", (d, rows), (tg, 1), out, gate, up, u32(d),
                 *[u32(s) for s in strides], threads=True)


@ACT_CASES
def test_silu_and_mul(libs, cxx, dtype, d, cpu_ops):
    """gate and up are the two halves of x's rows: x's buffer bound twice, up d
    elements in, both with x's row stride 2d (what the host does)."""
    rows = 5
    x = act_input((rows, 2 * d), dtype)
    out = poisoned_like(torch.empty(rows, d, dtype=dtype))
    flat = x.view(-1)
    silu_mul_dispatch(libs["activation", cxx], SUFFIX[dtype], out, flat, flat[d:], d, rows,
                      (d, 2 * d, 2 * d))
    gate, up = x[:, :d], x[:, d:]
    assert_close(out, silu_mul_ref(gate, up), dtype)
    check_vs_hf(out, gate, up, dtype)
    if cpu_ops is not None:
        assert_silu_matches_cpu_op(out, cpu_ops.silu_and_mul(x), dtype)


@ACT_CASES
def test_silu_mul_strided_rows(libs, cxx, dtype, d, cpu_ops):
    rows = 3
    gate = act_input((rows, d + 5), dtype)[:, 2:d + 2]  # rows d + 5 apart, offset 2
    up = act_input((rows, d), dtype)
    wide = poisoned_like(torch.empty(rows, d + 1, dtype=dtype))
    flat_gate = gate.as_strided((gate.numel() + 3 * rows,), (1,))  # base at gate[0, 0]
    silu_mul_dispatch(libs["activation", cxx], SUFFIX[dtype], wide.view(-1), flat_gate, up,
                      d, rows, (d + 1, d + 5, d), tg=32)
    out = wide[:, :d]
    assert_close(out, silu_mul_ref(gate, up), dtype)
    assert torch.isnan(wide[:, d]).all(), "wrote past the row"
    check_vs_hf(out, gate, up, dtype)
    if cpu_ops is not None:
        assert_silu_matches_cpu_op(out, cpu_ops.silu_mul(gate, up), dtype)


@ACT_CASES
def test_silu(libs, cxx, dtype, d, cpu_ops):
    rows = 4
    x = act_input((rows, d), dtype)
    out = poisoned_like(x)
    libs["activation", cxx].dispatch(f"silu_{SUFFIX[dtype]}", (d, rows), (64, 1), out, x, u32(d),
                                     u32(d), u32(d), threads=True)
    assert_close(out, silu_mul_ref(x), dtype)
    check_vs_hf(out, x, None, dtype)
    if cpu_ops is not None:
        assert_silu_matches_cpu_op(out, cpu_ops.silu(x), dtype)


def test_silu_extremes(libs, cxx):
    """exp(-v) overflowing to inf (v very negative) gives -0, not NaN; large v gives v."""
    x = torch.tensor([[-1e4, -100.0, -88.0, 0.0, 88.0, 1e4, 3e38]], dtype=torch.float32)
    out = poisoned_like(x)
    libs["activation", cxx].dispatch("silu_f32", (7, 1), (32, 1), out, x, u32(7), u32(7), u32(7),
                                     threads=True)
    assert torch.isfinite(out).all()
    assert out[0, 0] == 0 and out[0, 3] == 0 and out[0, 5] == 1e4 and out[0, 6] == 3e38


# ---- layer_norm.metal

AFFINE = ["weight+bias", "weight", "none"]


def ln_dispatch(lib, x, w, b, out, d, rows, x_stride, out_stride, eps=1e-5, tg=96, order=0):
    flags = (w is not None) | ((b is not None) << 1)
    lib.dispatch(f"layer_norm_{SUFFIX[x.dtype]}", (rows,), (tg,), x,
                 x if w is None else w, x if b is None else b,  # never read when absent
                 out, u32(d), u32(x_stride), u32(out_stride), u32(flags), np.float32([eps]),
                 order=order)


@pytest.mark.parametrize("kind", AFFINE)
@NORM_CASES
def test_layer_norm(libs, cxx, dtype, d, kind, cpu_ops):
    from test_layer_norm import assert_within_one_ulp_of_torch
    rows, eps = 5, 1e-5
    for tg in (32, 96, 1024):
        x = (torch.randn(rows, d) + 0.25).to(dtype)  # a non-zero mean to subtract
        w = torch.randn(d).to(dtype) if kind != "none" else None
        b = torch.randn(d).to(dtype) if kind == "weight+bias" else None
        out = poisoned_like(x)
        ln_dispatch(libs["layer_norm", cxx], x, w, b, out, d, rows, d, d, eps, tg, order=tg % 3)
        assert_close(out, layer_norm_ref(x, w, b, eps), dtype)
        assert_within_one_ulp_of_torch(out, x, w, b, eps, dtype)
        if cpu_ops is not None:  # the same statistics, summed in another order
            assert_within_one_ulp_of_torch(cpu_ops.layer_norm(x, w, b, eps), x, w, b, eps, dtype)


@pytest.mark.parametrize("dtype", list(SUFFIX))
def test_layer_norm_strided_and_in_place(libs, cxx, dtype):
    rows, d, eps = 4, 77, 1e-5
    lib = libs["layer_norm", cxx]
    wide = (torch.randn(rows, d + 9) + 1).to(dtype)
    x = wide[:, 3:d + 3]
    w, b = torch.randn(d).to(dtype), torch.randn(d).to(dtype)
    ref = layer_norm_ref(x, w, b, eps)
    out = poisoned_like(torch.empty(rows, d + 2, dtype=dtype))
    base = wide.view(-1)[3:]
    ln_dispatch(lib, base, w, b, out, d, rows, d + 9, d + 2, eps)
    assert_close(out[:, :d], ref, dtype)
    assert torch.isnan(out[:, d:]).all(), "wrote past the row"
    before = wide.clone()
    ln_dispatch(lib, base, w, b, base, d, rows, d + 9, d + 9, eps)  # out = x
    assert_close(x, ref, dtype)
    outside = torch.ones_like(wide, dtype=torch.bool)
    outside[:, 3:d + 3] = False
    assert torch.equal(wide[outside], before[outside]), "wrote outside x's rows"


def test_layer_norm_large_mean(libs, cxx):
    """|mean| >> std: two passes keep the variance, to the CPU test's bound
    (test_layer_norm.py); fp32 E[x^2] - mean^2 would lose most of its digits."""
    rows, d = 4, 4096
    x = (torch.randn(rows, d, dtype=torch.float64) * 0.5 + 300.0).float()
    out = poisoned_like(x)
    ln_dispatch(libs["layer_norm", cxx], x, None, None, out, d, rows, d, d, tg=256)
    ref = layer_norm_ref(x)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 2e-4


def test_layer_norm_constant_row(libs, cxx):
    """var = 0: the output is exactly the bias (sum / d correctly rounded: x - mean is 0),
    as test_layer_norm.py asks of the CPU."""
    d = 100
    x = torch.full((3, d), 7.25)
    b = torch.randn(d)
    out = poisoned_like(x)
    ln_dispatch(libs["layer_norm", cxx], x, torch.randn(d), b, out, d, 3, d, d, tg=64)
    assert torch.equal(out, b.expand(3, d))


# ---- q4k.metal: Q4_K / Q6_K gemv, the block layout from common/ggml_blocks.h

KQUANTS = {"Q4_K": ("q4k", 144), "Q6_K": ("q6k", 210)}
ROWS_PER_SIMD = 2  # q4k.metal's kRowsPerSimd


def random_blocks(n, nb, fmt, rng):
    """Random bytes are valid blocks once the fp16 factors are finite: every quant and
    scale pattern occurs, not only those our quantiser writes."""
    size = KQUANTS[fmt][1]
    q = rng.integers(0, 256, (n, nb, size), dtype=np.uint8)
    scale = lambda: rng.uniform(1e-3, 2e-2, (n, nb)).astype(np.float16).view(np.uint8)  # noqa: E731
    if fmt == "Q4_K":
        q[..., 0:2] = scale().reshape(n, nb, 2)  # d
        q[..., 2:4] = scale().reshape(n, nb, 2)  # dmin
    else:
        q[..., 208:210] = scale().reshape(n, nb, 2)  # d
    return q.reshape(n, nb * size)


def kquant_dispatch(lib, fmt, x, q, nsimd=4, order=0):
    m, k = x.shape
    n = q.shape[0]
    out = poisoned_like(torch.empty(m, n, dtype=x.dtype))
    rows = ROWS_PER_SIMD * nsimd
    lib.dispatch(f"{KQUANTS[fmt][0]}_gemv_{SUFFIX[x.dtype]}", ((n + rows - 1) // rows,),
                 (32 * nsimd,), x, q, out, u32(m), u32(n), u32(k), order=order)
    return out


@pytest.mark.parametrize("fmt", KQUANTS)
@pytest.mark.parametrize("dtype", list(SUFFIX))
def test_kquant_gemv(libs, cxx, fmt, dtype, cpu_ops):
    """Against gguf-py's dequantisation (llama.cpp's own reader) in fp64, for M = 1..8,
    odd N, several threadgroup sizes; and against our CPU op on the same bytes."""
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(torch.initial_seed())
    lib = libs["q4k", cxx]
    qtype = getattr(gguf.GGMLQuantizationType, fmt)
    for n, nb in [(1, 1), (19, 3), (33, 2)]:
        q = random_blocks(n, nb, fmt, rng)
        w = torch.from_numpy(gguf.quants.dequantize(q, qtype).astype(np.float64))
        qt = torch.from_numpy(q)
        for m in range(1, 9):
            x = torch.randn(m, nb * 256).to(dtype)
            nsimd = (1, 2, 4)[m % 3]
            out = kquant_dispatch(lib, fmt, x, qt, nsimd, order=m % 3)
            # Each sum within its rounding budget; with one weight row (n = 1) a cancelling
            # sum decides the norm, so the norm-wise budget only for more rows.
            assert_close_dot(out, x, w, dtype)
            if n > 1:
                assert_close(out, x.double() @ w.T, dtype)
            if cpu_ops is not None:
                cpu = getattr(cpu_ops, f"{KQUANTS[fmt][0]}_gemv")(x, qt)
                assert_close_dot(out, x, w, dtype, ref=cpu)
                if n > 1:
                    assert_close(out, cpu.double(), dtype)


@pytest.mark.parametrize("fmt", KQUANTS)
def test_kquant_gemv_quantised_weights(libs, cxx, fmt, cpu_ops):
    """Our quantiser's bytes (the CPU op), through the shader, against our CPU gemv."""
    if cpu_ops is None:
        pytest.skip("needs the CPU variant's quantiser")
    w = torch.randn(45, 512)
    q = getattr(cpu_ops, f"quantize_{fmt.lower()}")(w)
    x = torch.randn(3, 512)
    out = kquant_dispatch(libs["q4k", cxx], fmt, x, q)
    ref = getattr(cpu_ops, f"dequantize_{fmt.lower()}")(q).double()
    assert_close(out, x.double() @ ref.T, torch.float32)
    assert_close(out, getattr(cpu_ops, f"{KQUANTS[fmt][0]}_gemv")(x, q).double(), torch.float32)


def test_q4k_shader_compiles_the_metal_branch_of_the_shared_header():
    """The harness defines __METAL_VERSION__, as Apple's compiler does, so the shader
    sees ggml_blocks.h's MSL spelling, pre-passed like the shader itself."""
    tu = msl.translate(SHADERS / "q4k.metal")
    assert tu.startswith(f"#define __METAL_VERSION__ {msl.METAL_VERSION}\n")
    hdrs = msl.headers(SHADERS / "q4k.metal", INCLUDES)
    assert "ggml_blocks.h" in hdrs and "#if defined(__METAL_VERSION__)" in hdrs["ggml_blocks.h"]
