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

from reference import assert_close, poisoned_like, rms_norm_ref

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "msl_harness"))
import msl  # noqa: E402

SHADERS = ROOT / "metal_kernels"
TEST_SHADERS = Path(__file__).resolve().parent / "msl"
CXX = ["g++", "clang++-19"]
BUILT = [SHADERS / "matmul_tiled.metal", SHADERS / "matmul_simdgroup.metal",
         SHADERS / "rms_norm.metal",
         TEST_SHADERS / "simd_ops.metal", TEST_SHADERS / "divergence.metal"]


@pytest.fixture(scope="session")
def libs():
    """Every shader built with every compiler present, in parallel (cached on disk)."""
    present = [c for c in CXX if c in msl.compilers()]
    jobs = [(s, c) for s in BUILT for c in present]
    with ThreadPoolExecutor() as pool:
        list(pool.map(lambda j: msl.build(*j), jobs))
    return {(s.stem, c): msl.Library(s, c) for s, c in jobs}


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
    want = np.stack([np.repeat(g.sum(1), 32), np.repeat(g.max(1), 32),
                     g[:, (lane + 5) % 32].ravel(), g[:, lane ^ 1].ravel(),
                     np.repeat(g[:, 3], 32), np.concatenate([g[:, 1:], g[:, -1:]], 1).ravel()], 1)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    v4 = rng.standard_normal((96, 4)).astype(np.float32)
    o4 = np.full_like(v4, np.nan)
    lib.dispatch("simd_sum4", (96,), (96,), v4, o4, threads=True)
    np.testing.assert_allclose(o4, np.repeat(v4.reshape(3, 32, 4).sum(1), 32, 0), rtol=1e-5)


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
