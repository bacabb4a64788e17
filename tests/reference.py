"""fp64 references and comparison helpers shared by the tests."""

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

# Relative-error budgets of the output against an fp64 reference: two roundings
# to the dtype (normalised value, then product with the weight).
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
POISON = float("nan")


KQUANT_BYTES = {"Q4_K": 144, "Q6_K": 210}


def random_kquant(n: int, k: int, fmt: str) -> torch.Tensor:
    """Random Q4_K / Q6_K bytes [n, k / 256 * block] with finite, modest fp16 factors (d,
    and Q4_K's dmin): every bit pattern of levels, scales and mins, outputs stay finite."""
    nb, size = k // 256, KQUANT_BYTES[fmt]
    q = torch.randint(0, 256, (n, nb, size), dtype=torch.uint8)
    d = (torch.rand(n, nb, 1) * 2e-3 + 1e-4).half().view(torch.uint8)
    if fmt == "Q4_K":
        q[..., 0:2] = d
        q[..., 2:4] = (torch.rand(n, nb, 1) * 2e-3).half().view(torch.uint8)
    else:
        q[..., 208:210] = d
    return q.reshape(n, nb * size)


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x64 = x.double()
    inv = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    return weight.double() * (x64 * inv)


def assert_close_dot(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, dtype: torch.dtype,
                     ref: torch.Tensor | None = None) -> None:
    """assert_close for out = x @ w.T (w in fp64), element by element. A dot product's
    rounding error scales with sum |x_i w_i|, not with its value: a sum of random terms
    that cancels to near zero can be far off in relative terms and still right. Allowed
    per element: the dtype's budget of the largest output, plus k units of fp32 rounding
    of sum |x_i w_i| (recursive summation's worst case over k terms), twice that when
    ref is another fp32 computation instead of the fp64 product."""
    assert out.dtype == dtype
    assert torch.isfinite(out).all(), "non-finite output (an element left unwritten?)"
    x64, w64 = x.double().cpu(), w.double().cpu()
    exact = x64 @ w64.T
    r = exact if ref is None else ref.double().cpu()
    terms = x64.abs() @ w64.abs().T
    k = x.shape[-1]
    allowed = 4 * TOL[dtype] * exact.abs().max() + (1 if ref is None else 2) * k * 2.0**-24 * terms
    excess = ((out.double().cpu() - r).abs() - allowed).max().item()
    assert excess <= 0, f"an element is {excess:.3g} past its rounding budget"


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    assert out.dtype == dtype
    assert torch.isfinite(out).all(), "non-finite output (an element left unwritten?)"
    o, r = out.double().cpu(), ref.double().cpu()
    err = ((o - r).norm() / r.norm().clamp_min(1e-30)).item()
    assert err < TOL[dtype], f"relative error {err:.3g} over {TOL[dtype]:.1g}"
    # Element-wise too: a norm can hide a few wrong elements in a large tensor.
    tol = 4 * TOL[dtype] * r.abs().max().clamp_min(1e-30)
    worst = (o - r).abs().max().item()
    assert worst <= tol, f"worst element error {worst:.3g} over {tol.item():.3g}"


def poisoned_like(t: torch.Tensor) -> torch.Tensor:
    return torch.full_like(t, POISON)


def silu_mul_ref(gate: torch.Tensor, up: torch.Tensor | None = None) -> torch.Tensor:
    g = gate.double()
    s = g / (1 + torch.exp(-g))
    return s if up is None else s * up.double()


def silu_mul_hf(gate: torch.Tensor, up: torch.Tensor | None = None) -> torch.Tensor:
    """HF's LlamaMLP in the model dtype: torch's silu (rounded to the dtype), times up."""
    return F.silu(gate) if up is None else F.silu(gate) * up


def fp8_ref(y: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """torch's own fp8 conversion of clamp(float(y) * (1 / scale)), vLLM's recipe."""
    inv = 1.0 / scale.float()
    return (y.float() * inv).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def fp8_order(q: torch.Tensor) -> torch.Tensor:
    """fp8 codes as integers in value order (+0 and -0 both 0; NaN codes at +-127)."""
    b = q.view(torch.uint8).int()
    return torch.where(b >= 0x80, -(b & 0x7F), b)


def ulp_of(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The unit in the last place of dtype at each |v| (v in fp64), subnormals included."""
    fi = torch.finfo(dtype)
    _, exp = torch.frexp(v.abs())
    return torch.ldexp(torch.full_like(v, fi.eps), exp - 1).clamp_min(fi.smallest_normal * fi.eps)


def ulps_apart(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """|a - b| in units in the last place (of dtype) of the larger of the two."""
    a, b = a.double().cpu(), b.double().cpu()
    ulp = ulp_of(torch.maximum(a.abs(), b.abs()), dtype)
    same = (a == b) | (a.isnan() & b.isnan())
    return torch.where(same, torch.zeros_like(a), (a - b).abs() / ulp)


def assert_silu_matches_cpu_op(out: torch.Tensor, cpu: torch.Tensor, dtype: torch.dtype) -> None:
    """A SwiGLU output computed with the C library's exp (the MSL harness's stand-in for
    Metal's) against our CPU op's: the same formula and rounding steps, but on x86 the CPU
    op's vector exp (cpu_kernels/row_simd.h, SLEEF's, as torch's) and the C library's can
    be an ulp or so apart, which the division and the product with up can grow to 3 ulps
    of fp32 (measured); rounded to 16 bits, at most one ulp of the dtype remains."""
    allowed = 4 if dtype == torch.float32 else 1
    apart = ulps_apart(out, cpu, dtype)
    assert (apart <= allowed).all(), f"{apart.max().item():.0f} ulps apart"
    assert torch.equal(out.isnan(), cpu.isnan())


def layer_norm_ref(x: torch.Tensor, weight=None, bias=None, eps: float = 1e-5) -> torch.Tensor:
    """fp64 LayerNorm over the last dimension (biased variance, as F.layer_norm)."""
    x64 = x.double()
    mean = x64.mean(-1, keepdim=True)
    var = (x64 - mean).pow(2).mean(-1, keepdim=True)
    y = (x64 - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y


# (rows, hidden) that put the CUDA norm kernels on each row layout of
# cuda_kernels/row_kernel.cuh (for bf16/fp16; fp32 rows are twice the vectors): a
# warp per row with a partial last block (1000), a block per row with 2, 4 and 8
# vectors a thread (2056, 4104, 16384 at 300 rows), a cluster of 2..8 blocks (few
# rows; fp32 16384 at 300 rows needs two blocks whatever the rows), the scalar path
# over a cluster (1030: not a multiple of 8), and the streaming kernel for rows past
# 16384 vectors (140000); and LayerNorm's flat kernel at 4 vectors a thread over an
# exact fit past 132 rows (5120 at 200 rows: 160 x 4; 1024 at 150 rows, 16-bit: 64 x 2);
# and RMSNorm's piped layout past 256 rows of 513-2048 vectors (300 x 4104, 300 x 16384,
# 257 x 8200), with more rows than persistent blocks at 2600 x 4104 (about 3 rows a
# block); and its exact fits at 16-bit hidden 8192 and 16384 (flat at 8192 for the
# norm with and without the residual, piped for fp8: 3, 40 and 600 x 8192; piped at 5
# and 300 x 16384, flat 1024 threads at 1030 x 16384 and for static fp8 with the
# residual at 40 x 16384; fp32 takes the general piped kernel at 600 x 8192; the fp8
# modes take the flat fit at 8192).
LAYOUT_SHAPES = [(300, 1000), (150, 1024), (3, 2056), (2, 4096), (200, 4096), (300, 4104), (200, 5120),
                 (300, 16384), (5, 16384), (40, 16384), (9, 1030), (2, 140000), (257, 8200), (2600, 4104),
                 (3, 8192), (40, 8192), (600, 8192), (140, 2048), (1030, 16384)]


def header_lib(tmp_dir: Path, source: str) -> ctypes.CDLL:
    """Compiles `source` (C++ wrapping headers of common/ in extern "C" functions) with the
    host compiler and loads it: the device-independent code the GPU kernels include, run
    on the CPU. Skips when there is no C++ compiler."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if not cxx:
        pytest.skip("no host C++ compiler")
    root = Path(__file__).resolve().parent.parent
    (tmp_dir / "w.cpp").write_text(source)
    so = tmp_dir / "libheader.so"
    subprocess.run([cxx, "-std=c++20", "-O2", "-Wall", "-Werror", "-shared", "-fPIC",
                    f"-I{root / 'common'}", str(tmp_dir / "w.cpp"), "-o", str(so)], check=True)
    return ctypes.CDLL(str(so))
