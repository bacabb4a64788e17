"""rms_norm and fused_add_rms_norm against an fp64 reference, through the built kernel."""

import pytest
import torch

import isa
from reference import LAYOUT_SHAPES, assert_close, poisoned_like, rms_norm_ref, ulp_of

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
HIDDEN = [1, 3, 127, 5120, 16385]
ROWS = [0, 1, 7]
EPS = 1e-6


def rand(shape, dtype, device):
    # Offset so rows have a non-zero mean: a norm must not assume centred data.
    return (torch.randn(shape, dtype=torch.float32, device=device) + 0.25).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("rows", ROWS)
def test_rms_norm(ik, device, dtype, hidden, rows):
    x = rand((rows, hidden), dtype, device)
    w = rand((hidden,), dtype, device)
    x_before = x.clone()
    out = poisoned_like(x)
    res = ik.rms_norm(x, w, EPS, out=out)
    assert res is out
    assert torch.equal(x, x_before), "rms_norm wrote to its input"
    if rows:
        assert_close(out, rms_norm_ref(x, w, EPS), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_3d_and_allocated_out(ik, device, dtype):
    x = rand((2, 5, 4096), dtype, device)
    w = rand((4096,), dtype, device)
    out = ik.rms_norm(x, w, EPS)
    assert out.shape == x.shape and out.is_contiguous()
    assert_close(out, rms_norm_ref(x, w, EPS), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_matches_hf_rounding(ik, device, dtype):
    """HF LlamaRMSNorm rounds the normalised value to the dtype before the weight."""
    x = rand((9, 2048), dtype, device)
    w = rand((2048,), dtype, device)
    xf = x.float()
    n = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(dtype)
    hf = w * n
    out = ik.rms_norm(x, w, EPS)
    # Same formula, different summation order: the rounded normalised values may be one
    # ulp apart, which the weight scales by |w| before the product's own rounding (one
    # ulp of the output covers both roundings). A fixed one-ulp tolerance failed in CI
    # (fp16, two output ulps at |w| near 2: about one draw in a thousand). fp32 rounds
    # nothing away: the order, and CUDA's rsqrtf (2 ulps) on both sides, so 8 ulps of n
    # (against the CPU op: up to twice the one-ulp bound in 4500 draws).
    n64, w64, hf64, out64 = (t.double().cpu() for t in (n, w, hf, out))
    n_ulps = 8 if dtype == torch.float32 else 1
    top = torch.maximum(out64.abs(), hf64.abs())  # the two roundings' larger ulp
    bound = w64.abs() * n_ulps * ulp_of(n64, dtype) + ulp_of(top, dtype)
    diff = (out64 - hf64).abs()
    assert (diff <= bound).all(), f"{(diff / bound).max().item():.2f}x the bound"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [8, 4096, 5123])
def test_rms_norm_strided_rows(ik, device, dtype, hidden):
    """Columns [3:3+hidden] of a wider tensor (misaligned), and every other row."""
    wide = rand((11, hidden + 5), dtype, device)
    x = wide[:, 3:3 + hidden]
    w = rand((hidden,), dtype, device)
    out_wide = poisoned_like(wide)
    out = out_wide[:, 1:1 + hidden]
    ik.rms_norm(x, w, EPS, out=out)
    assert_close(out, rms_norm_ref(x, w, EPS), dtype)
    # The kernel must not write outside its view.
    assert out_wide[:, :1].isnan().all() and out_wide[:, 1 + hidden:].isnan().all()

    x2 = rand((14, hidden), dtype, device)[::2]
    assert_close(ik.rms_norm(x2, w, EPS), rms_norm_ref(x2, w, EPS), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_misaligned_storage(ik, device, dtype):
    """A tensor starting one element into its storage takes the scalar path."""
    hidden = 4096
    buf = rand((3 * hidden + 1,), dtype, device)
    x = buf[1:].view(3, hidden)
    w = rand((hidden + 1,), dtype, device)[1:]
    assert_close(ik.rms_norm(x, w, EPS), rms_norm_ref(x, w, EPS), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_in_place(ik, device, dtype):
    x = rand((6, 5120), dtype, device)
    w = rand((5120,), dtype, device)
    ref = rms_norm_ref(x, w, EPS)
    ik.rms_norm(x, w, EPS, out=x)
    assert_close(x, ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("rows", ROWS)
def test_fused_add_rms_norm(ik, device, dtype, hidden, rows):
    x = rand((rows, hidden), dtype, device)
    r = rand((rows, hidden), dtype, device)
    w = rand((hidden,), dtype, device)
    expected_sum = x + r  # torch rounds the sum to the dtype, as the op must
    x_io, r_io = x.clone(), r.clone()
    assert ik.fused_add_rms_norm(x_io, r_io, w, EPS) is None
    assert torch.equal(r_io, expected_sum), "residual must be exactly x + residual in the dtype"
    if rows:
        assert_close(x_io, rms_norm_ref(expected_sum, w, EPS), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_add_rms_norm_strided(ik, device, dtype):
    hidden = 4096
    xw = rand((5, hidden + 8), dtype, device)
    rw = rand((5, hidden + 3), dtype, device)
    x, r = xw[:, 8:], rw[:, 3:]
    w = rand((hidden,), dtype, device)
    expected_sum = x + r
    xw_before = xw.clone()
    ik.fused_add_rms_norm(x, r, w, EPS)
    assert torch.equal(r, expected_sum)
    assert_close(x, rms_norm_ref(expected_sum, w, EPS), dtype)
    assert torch.equal(xw[:, :8], xw_before[:, :8]), "wrote outside the view"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("hidden,rows", [(h, r) for h in (2048, 4096, 8192) for r in (1, 3, 200, 300)]
                         + [(8192, 600), (8192, 800), (8192, 1030), (16384, 3), (16384, 130), (16384, 300)])
def test_exact_fit_views(ik, device, dtype, hidden, rows):
    """The flat exact fit (16-bit hidden 2048 and 4096, with the residual up to 512 rows;
    8192 from 128 rows to 767 alone, to 511 with the residual) and, on CUDA, the split
    rows (16384: 8 blocks a row, 4 for RMSNorm alone from 128 rows; 8192 below 128 rows
    and from 768 alone, 512 with the residual (600, 800 and 1030 rows): 4 blocks, 2 for
    RMSNorm alone) on every other row of a tensor, on column views 16 bytes in, and in
    place."""
    w = rand((hidden,), dtype, device)
    x = rand((2 * rows, hidden), dtype, device)[::2]
    out = poisoned_like(x)
    ik.rms_norm(x, w, EPS, out=out)
    assert_close(out, rms_norm_ref(x, w, EPS), dtype)
    y = x.contiguous()
    ref = rms_norm_ref(y, w, EPS)
    ik.rms_norm(y, w, EPS, out=y)
    assert_close(y, ref, dtype)

    xw = rand((rows, hidden + 16), dtype, device)
    rw = rand((rows, hidden + 8), dtype, device)
    xv, rv = xw[:, 8:8 + hidden], rw[:, 8:]
    expected_sum = xv + rv
    xw_before = xw.clone()
    ik.fused_add_rms_norm(xv, rv, w, EPS)
    assert torch.equal(rv, expected_sum), "residual must be exactly x + residual in the dtype"
    assert_close(xv, rms_norm_ref(expected_sum, w, EPS), dtype)
    assert torch.equal(xw[:, :8], xw_before[:, :8]) and torch.equal(xw[:, 8 + hidden:], xw_before[:, 8 + hidden:]), \
        "wrote outside the view"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,hidden", LAYOUT_SHAPES)
def test_row_layouts(ik, device, dtype, rows, hidden):
    x = rand((rows, hidden), dtype, device)
    r = rand((rows, hidden), dtype, device)
    w = rand((hidden,), dtype, device)
    out = poisoned_like(x)
    ik.rms_norm(x, w, EPS, out=out)
    assert_close(out, rms_norm_ref(x, w, EPS), dtype)
    expected_sum = x + r
    ik.fused_add_rms_norm(x, r, w, EPS)
    assert torch.equal(r, expected_sum), "residual must be exactly x + residual in the dtype"
    assert_close(x, rms_norm_ref(expected_sum, w, EPS), dtype)


def test_eps_is_used(ik, device):
    x = torch.full((2, 64), 1e-3, device=device)
    w = torch.ones(64, device=device)
    out = ik.rms_norm(x, w, 1.0)
    assert_close(out, rms_norm_ref(x, w, 1.0), torch.float32)


# ---- errors: every bad input is refused with a message naming what was expected.

def test_rejects_bad_dtype(ik, device):
    x = torch.randn(4, 16, device=device, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        ik.rms_norm(x, torch.randn(16, device=device, dtype=torch.float64), EPS)
    xi = torch.ones(4, 16, device=device, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        ik.fused_add_rms_norm(xi, xi.clone(), torch.ones(16, device=device, dtype=torch.int32), EPS)


def test_rejects_mismatched_weight(ik, device):
    x = torch.randn(4, 16, device=device)
    with pytest.raises(RuntimeError, match=r"weight must have shape \[16\]"):
        ik.rms_norm(x, torch.randn(15, device=device), EPS)
    with pytest.raises(RuntimeError, match="weight must have the dtype of x"):
        ik.rms_norm(x, torch.randn(16, device=device, dtype=torch.float16), EPS)
    with pytest.raises(RuntimeError, match="weight must be contiguous"):
        ik.rms_norm(x, torch.randn(32, device=device)[::2], EPS)


def test_rejects_bad_out_and_residual(ik, device):
    x = torch.randn(4, 16, device=device)
    w = torch.randn(16, device=device)
    with pytest.raises(RuntimeError, match="out must have the shape of x"):
        ik.rms_norm(x, w, EPS, out=torch.empty(4, 17, device=device))
    with pytest.raises(RuntimeError, match="out must have the dtype of x"):
        ik.rms_norm(x, w, EPS, out=torch.empty(4, 16, device=device, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="residual must have the shape of x"):
        ik.fused_add_rms_norm(x, torch.randn(4, 15, device=device), w, EPS)
    with pytest.raises(RuntimeError, match="x must not overlap residual, got views that share the same elements"):
        ik.fused_add_rms_norm(x, x, w, EPS)
    with pytest.raises(RuntimeError, match="eps must be non-negative"):
        ik.rms_norm(x, w, -1.0)


def test_rejects_bad_layout(ik, device):
    w = torch.randn(16, device=device)
    xt = torch.randn(16, 4, device=device).t()
    with pytest.raises(RuntimeError, match="contiguous in its last dimension"):
        ik.rms_norm(xt, w, EPS)
    # [2, 3, 16] with its two leading dims transposed: no single row stride exists.
    x3 = torch.randn(3, 2, 16, device=device).transpose(0, 1)
    with pytest.raises(RuntimeError, match="cannot be viewed as one row dimension"):
        ik.rms_norm(x3, w, EPS)
    with pytest.raises(RuntimeError, match="at least one dimension"):
        ik.rms_norm(torch.tensor(1.0, device=device), torch.randn(1, device=device), EPS)


def test_rejects_wrong_device(ik, device):
    x = torch.randn(4, 16)
    if device == "cuda":
        with pytest.raises(RuntimeError, match="weight must be on the same device as x"):
            ik.rms_norm(x.cuda(), torch.randn(16), EPS)
        # The CUDA variant has no CPU kernel: torch's dispatcher says so.
        with pytest.raises(NotImplementedError):
            ik.rms_norm(x, torch.randn(16), EPS)
    else:
        with pytest.raises(RuntimeError, match="weight must be on the same device as x"):
            ik.rms_norm(x, torch.randn(16, device="meta"), EPS)


# ---- the CPU instruction sets (cpu_isa.h): rms_norm and fused_add_rms_norm have an AVX2 and
# an AVX-512 build of their row loops beside the portable one.

# Integer-valued rows: every sum of squares is exact in fp32 whatever the order, so each
# instruction set must give the same bits, NaN and infinity rows included.
SAME_BITS = """
import hashlib, sys, torch, kernels
ik = kernels.get_kernel("inference-kernels/inference-kernels", version=1)
g = torch.Generator().manual_seed(5)
h = hashlib.sha256()
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    for hidden in (4099, 31, 64):
        x = torch.randint(-8, 9, (6, hidden), generator=g).to(dtype)
        x[4, 3], x[5, 0] = float("nan"), float("inf")
        w = torch.randn(hidden, generator=g).to(dtype)
        res = torch.randint(-4, 5, (6, hidden), generator=g).to(dtype)
        outs = [ik.rms_norm(x, w, 1e-6)]
        xa, ra = x.clone(), res.clone()
        ik.fused_add_rms_norm(xa, ra, w, 1e-6)
        for t in outs + [xa, ra]:
            h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
print(ik.ops.cpu_isa(), h.hexdigest())
"""


def test_every_isa_gives_the_same_bits(ik, device):
    isa.skip_unless_parent(device)
    digests = {}
    for name in isa.supported(ik):
        proc = isa.run_child(["-c", SAME_BITS], name)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got, digest = proc.stdout.split()[-2:]
        assert got == name
        digests[name] = digest
    assert len(set(digests.values())) == 1, digests


@pytest.mark.parametrize("name", isa.ISAS)
def test_every_isa(ik, device, name):
    """This file's CPU cases again under every instruction set."""
    isa.skip_unless_parent(device)
    isa.rerun_under(ik, name, "test_rms_norm.py",
                    "cpu and not every_isa and not rejects and not row_layouts and not exact_fit", 2 * 3 * 5 * 3)
