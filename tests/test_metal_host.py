"""The Metal host wrappers (metal_kernels/*_torch.cpp) and torch_binding.cpp's MPS
registrations, built for CPU tensors with their dispatches run by the MSL harness
(tools/msl_harness/mps_emulation.*): the ops as a user calls them on MPS, with the
checks, kernel names, buffer bindings (storage offsets included), scalars and grids
the wrappers produce. Only mps_dispatch.mm (the Objective-C that encodes a dispatch on
the MPS stream) is replaced; it, Apple's compiler and an Apple GPU are not tested."""

import sys
from pathlib import Path

import pytest
import torch

from conftest import loaded_backend
from reference import (assert_close, assert_silu_matches_cpu_op, layer_norm_ref, poisoned_like, rms_norm_ref,
                       silu_mul_ref)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "msl_harness"))
import msl  # noqa: E402
import mps_emulation  # noqa: E402

SHADERS = ["rms_norm", "layer_norm", "activation", "q4k", "matmul_tiled", "matmul_simdgroup"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture(scope="module")
def mps():
    if "g++" not in msl.compilers():
        pytest.skip("g++ not installed")
    libs = [msl.build(ROOT / "metal_kernels" / f"{s}.metal", "g++", includes=[ROOT / "common"])
            for s in SHADERS]
    return mps_emulation.load(libs)


@pytest.fixture(scope="module")
def cpu_ops(request):
    return request.getfixturevalue("ik") if loaded_backend() == "cpu" else None


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_and_fused_add(mps, dtype):
    x, w = torch.randn(3, 5, 129).to(dtype), torch.randn(129).to(dtype)
    out = poisoned_like(x)
    mps.rms_norm(out, x, w, 1e-6)
    assert_close(out, rms_norm_ref(x, w, 1e-6), dtype)
    r = torch.randn_like(x)
    xs, rs = x.clone(), r.clone()
    mps.fused_add_rms_norm(xs, rs, w, 1e-5)
    assert torch.equal(rs, x + r)
    assert_close(xs, rms_norm_ref(x + r, w, 1e-5), dtype)


def test_storage_offsets_reach_the_shader(mps):
    """Tensors that start inside their storage: the wrappers bind the offset."""
    buf = torch.randn(7 + 4 * 33)
    x = buf[7:].view(4, 33)
    w = torch.randn(40)[5:38]
    out = poisoned_like(torch.empty(9 + 4 * 33))[9:].view(4, 33)
    mps.rms_norm(out, x, w, 1e-6)
    assert_close(out, rms_norm_ref(x, w, 1e-6), torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["weight+bias", "weight", "none"])
def test_layer_norm_strided_rows(mps, dtype, kind):
    wide = (torch.randn(6, 300) + 0.5).to(dtype)
    x = wide[:, 10:267]  # rows 300 apart, starting 10 in
    w = torch.randn(257).to(dtype) if kind != "none" else None
    b = torch.randn(257).to(dtype) if kind == "weight+bias" else None
    out = poisoned_like(torch.empty(6, 257, dtype=dtype))
    mps.layer_norm(out, x, w, b, 1e-5)
    assert_close(out, layer_norm_ref(x, w, b, 1e-5), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_activations(mps, cpu_ops, dtype):
    x = (torch.randn(4, 2 * 77) * 3).to(dtype)
    out = poisoned_like(torch.empty(4, 77, dtype=dtype))
    mps.silu_and_mul(out, x)
    assert_close(out, silu_mul_ref(x[:, :77], x[:, 77:]), dtype)
    gate = (torch.randn(3, 90) * 3).to(dtype)[:, 5:82]  # strided rows
    up = (torch.randn(3, 77) * 3).to(dtype)
    out2 = poisoned_like(up)
    mps.silu_mul(out2, gate, up)
    assert_close(out2, silu_mul_ref(gate, up), dtype)
    out3 = poisoned_like(up)
    mps.silu(out3, up)
    assert_close(out3, silu_mul_ref(up), dtype)
    if cpu_ops is not None:
        assert_silu_matches_cpu_op(out, cpu_ops.silu_and_mul(x), dtype)
        assert_silu_matches_cpu_op(out2, cpu_ops.silu_mul(gate, up), dtype)
        assert_silu_matches_cpu_op(out3, cpu_ops.silu(up), dtype)


@pytest.mark.parametrize("fmt,size", [("q4k", 144), ("q6k", 210)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_kquant_gemv(mps, cpu_ops, fmt, size, dtype):
    gguf = pytest.importorskip("gguf")
    from test_metal_harness import random_blocks
    import numpy as np
    name = {"q4k": "Q4_K", "q6k": "Q6_K"}[fmt]
    q = torch.from_numpy(random_blocks(21, 2, name, np.random.default_rng(torch.initial_seed())))
    w = torch.from_numpy(gguf.quants.dequantize(q.numpy(), getattr(gguf.GGMLQuantizationType, name)))
    for m in (1, 5, 8):
        x = torch.randn(m, 512).to(dtype)
        out = poisoned_like(torch.empty(m, 21, dtype=dtype))
        getattr(mps, f"{fmt}_gemv")(out, x, q)
        assert_close(out, x.double() @ w.double().T, dtype)
        if cpu_ops is not None:
            assert_close(out, getattr(cpu_ops, f"{fmt}_gemv")(x, q).double(), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul(mps, dtype):
    # Multiples of 8 take matmul_simdgroup_f32 for fp32; the rest matmul_tiled.
    for m, n, k in [(8, 16, 24), (17, 33, 65), (1, 1, 1), (5, 3, 0)]:
        a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        out = poisoned_like(torch.empty(m, n, dtype=dtype))
        mps.matmul(out, a, b)
        assert_close(out, a.double() @ b.double(), dtype) if k else torch.equal(out, torch.zeros(m, n))


def test_the_wrappers_checks(mps):
    x, w = torch.randn(4, 16), torch.randn(16)
    with pytest.raises(RuntimeError, match="x must be contiguous for the Metal kernel"):
        mps.rms_norm(torch.empty(4, 16), torch.randn(4, 32)[:, :16], w, 1e-6)  # CPU takes it
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        mps.rms_norm(x.double(), x.double(), w.double(), 1e-6)
    with pytest.raises(RuntimeError, match=r"weight must have shape \[16\]"):
        mps.layer_norm(x, x, torch.randn(15), None, 1e-5)
    with pytest.raises(RuntimeError, match="x must have an even last dimension"):
        mps.silu_and_mul(torch.empty(4, 8), torch.randn(4, 17))
    with pytest.raises(RuntimeError, match="x must have 1 to 8 rows"):
        mps.q4k_gemv(torch.empty(9, 1), torch.randn(9, 256), torch.zeros(1, 144, dtype=torch.uint8))
    with pytest.raises(RuntimeError, match="q must start at an address aligned to 2 bytes"):
        q = torch.zeros(211, dtype=torch.uint8)[1:].view(1, 210)
        mps.q6k_gemv(torch.empty(1, 1), torch.randn(1, 256), q)
    with pytest.raises(RuntimeError, match="a must be contiguous for the Metal kernel"):
        mps.matmul(torch.empty(4, 4), torch.randn(4, 4).t(), torch.randn(4, 4))


def test_mps_dispatch_mm_parses_as_objective_cpp():
    """mps_dispatch.mm through clang's Objective-C++ front end, with and without ARC,
    against torch's real ATen/mps headers and hand-written stand-ins for the few Apple
    declarations it uses (tools/msl_harness/objc_stubs/: NOT Apple's SDK). Catches syntax,
    C++ and block errors; says nothing about Apple's real API signatures."""
    import shutil
    import subprocess
    from torch.utils import cpp_extension
    if not shutil.which("clang++-19"):
        pytest.skip("clang++-19 not installed (`make rocm-toolchain` installs it)")
    stubs = ROOT / "tools" / "msl_harness" / "objc_stubs"
    incs = [f"-isystem{p}" for p in cpp_extension.include_paths("cpu")]
    for arc in ([], ["-fobjc-arc"]):
        r = subprocess.run(
            ["clang++-19", "-x", "objective-c++", "-std=c++20", "-fsyntax-only", "-fblocks",
             "-fobjc-runtime=gnustep-2.0", "-Wall", "-Werror", *arc, f"-I{stubs}", "-DMETAL_KERNEL",
             f'-DEMBEDDED_METALLIB_HEADER="{stubs / "embedded_metallib.h"}"',
             "-DEMBEDDED_METALLIB_NAMESPACE=inference_kernels_metal", f"-I{ROOT / 'common'}",
             f"-I{ROOT / 'torch-ext'}", *incs, str(ROOT / "metal_kernels" / "mps_dispatch.mm")],
            capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-4000:]
