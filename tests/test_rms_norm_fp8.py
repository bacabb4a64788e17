"""rms_norm_fp8 (static scale) and rms_norm_fp8_dynamic (per-row scales)."""

import pytest
import torch

from reference import LAYOUT_SHAPES, rms_norm_ref

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
HIDDEN = [1, 3, 127, 5120, 16385]
EPS = 1e-6


def rand(shape, dtype, device):
    return (torch.randn(shape, device=device) + 0.25).to(dtype)


def rms_norm_rounded(x, w, eps):
    """The op's y: HF's rounding (normalised value, then the product, in x's dtype)."""
    xf = x.float()
    inv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (w.float() * (xf * inv).to(x.dtype).float()).to(x.dtype)


def assert_scales_close(scales, ref_scales, dtype):
    """Per-row dynamic scales against the reference's. The kernel's fp32 1/rms may differ
    from the reference's in its last bits (another summation order), so each of y's two
    roundings to the dtype (the normalised value, then the product) can land one step
    apart: the row's absmax, and so its scale, within two ulps, 2 * 2^-7 relative in bf16
    (a CPU run at 1030 x 16384 bf16 saw 1.03e-2), and never looser than the 1e-2 the test
    has always allowed."""
    ulp = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}.get(dtype, 0.0)
    torch.testing.assert_close(scales, ref_scales, rtol=max(1e-2, 2 * ulp), atol=0)


def quantise(y, inv_scale):
    v = y.float() * inv_scale
    return torch.where(v.isnan(), v, v.clamp(-FP8_MAX, FP8_MAX)).to(FP8)


def fp8_poison(shape, device):
    return torch.full(shape, float("nan"), device=device).to(FP8)


def assert_fp8_close(q, q_ref):
    """Equal but for elements one fp8 step apart, which a one-ulp difference in y
    (another summation order for the row's sum of squares) can cause; such
    elements must stay rare."""
    assert q.dtype == FP8 and q.shape == q_ref.shape
    a, b = q.float().cpu(), q_ref.float().cpu()
    assert not a.isnan().any(), "NaN in the output (an element left unwritten?)"
    diff = (a - b).abs()
    step = torch.maximum(b.abs(), a.abs()) * 2.0 ** -3 + 2.0 ** -9  # e4m3: 3 mantissa bits
    assert (diff <= step).all(), f"worst fp8 difference {diff.max().item():.3g}"
    # The bound: fewer than 0.5% of the elements; a tensor of under 200 elements
    # may still hold one (one of 127 is 0.8%: seen about once in 15 runs at fp32).
    n_diff = int((diff > 0).sum())
    allowed = max(1, int(0.005 * diff.numel()))
    assert n_diff <= allowed, f"{n_diff} of {diff.numel()} elements differ by one fp8 step"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("rows", [0, 1, 7])
def test_rms_norm_fp8_static(ik, device, dtype, hidden, rows):
    x = rand((rows, hidden), dtype, device)
    w = rand((hidden,), dtype, device)
    y = rms_norm_rounded(x, w, EPS)
    # A calibrated scale, as a static-quantisation user would have: no saturation here
    # (saturation has its own test).
    scale = (y.float().abs().amax() / 400).clamp_min(1e-3).reshape(1) if rows else torch.ones(1, device=device)
    out = fp8_poison(x.shape, device)
    res = ik.rms_norm_fp8(x, w, scale, EPS, out=out)
    assert res is out
    if rows:
        assert_fp8_close(out, quantise(y, 1.0 / scale.item()))
        # And against fp64: fp8 rounding (at most 2^-4 relative per element) dominates.
        ref = rms_norm_ref(x, w, EPS)
        deq = out.double().cpu() * scale.item()
        err = ((deq - ref.cpu()).norm() / ref.norm().cpu()).item()
        assert err < 0.07, f"relative error {err:.3g} against fp64"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [1, 127, 5120, 16385])
@pytest.mark.parametrize("rows", [1, 7])
def test_rms_norm_fp8_dynamic(ik, device, dtype, hidden, rows):
    x = rand((rows, hidden), dtype, device)
    w = rand((hidden,), dtype, device)
    out, scales = ik.rms_norm_fp8_dynamic(x, w, EPS)
    assert out.dtype == FP8 and scales.shape == (rows, 1) and scales.dtype == torch.float32
    y = rms_norm_rounded(x, w, EPS)
    ref_scales = (y.float().abs().amax(-1, keepdim=True) / FP8_MAX).clamp_min(1 / (FP8_MAX * 512))
    assert_scales_close(scales, ref_scales, dtype)
    assert_fp8_close(out, quantise(y, 1.0 / scales))
    # The row's largest element lands at (or one step under) the format's max, unless
    # the row is so small that the 1/(448*512) floor set its scale.
    floored = ref_scales.squeeze(-1) <= 1 / (FP8_MAX * 512)
    assert (out.float().abs().amax(-1)[~floored] >= FP8_MAX * 0.9).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,hidden", LAYOUT_SHAPES)
def test_fp8_row_layouts(ik, device, dtype, rows, hidden):
    x = rand((rows, hidden), dtype, device)
    r = rand((rows, hidden), dtype, device)
    w = rand((hidden,), dtype, device)
    s = x + r
    y = rms_norm_rounded(s, w, EPS)
    scale = (y.float().abs().amax() / 400).reshape(1)
    r_io, out = r.clone(), fp8_poison(x.shape, device)
    ik.rms_norm_fp8(x, w, scale, EPS, residual=r_io, out=out)
    assert torch.equal(r_io, s), "residual must be exactly x + residual in the dtype"
    assert_fp8_close(out, quantise(y, 1.0 / scale))
    r_io = r.clone()
    out, scales = ik.rms_norm_fp8_dynamic(x, w, EPS, residual=r_io)
    assert torch.equal(r_io, s)
    ref_scales = (y.float().abs().amax(-1, keepdim=True) / FP8_MAX).clamp_min(1 / (FP8_MAX * 512))
    assert_scales_close(scales, ref_scales, dtype)
    assert_fp8_close(out, quantise(y, 1.0 / scales))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_fp8_residual(ik, device, dtype):
    x = rand((5, 4096), dtype, device)
    r = rand((5, 4096), dtype, device)
    w = rand((4096,), dtype, device)
    scale = torch.tensor([0.01], device=device)
    s = x + r
    x_before = x.clone()
    r_io = r.clone()
    out = ik.rms_norm_fp8(x, w, scale, EPS, residual=r_io)
    assert torch.equal(r_io, s), "residual must be exactly x + residual in the dtype"
    assert torch.equal(x, x_before), "x must not be written"
    assert_fp8_close(out, quantise(rms_norm_rounded(s, w, EPS), 100.0))

    r_io = r.clone()
    out, scales = ik.rms_norm_fp8_dynamic(x, w, EPS, residual=r_io)
    assert torch.equal(r_io, s)
    assert_fp8_close(out, quantise(rms_norm_rounded(s, w, EPS), 1.0 / scales))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_fp8_strided_and_misaligned(ik, device, dtype):
    hidden = 4096
    wide = rand((6, hidden + 3), dtype, device)
    x = wide[:, 3:]  # misaligned rows: the scalar path
    w = rand((hidden,), dtype, device)
    scale = torch.tensor([0.05], device=device)
    out_wide = fp8_poison((6, hidden + 8), device)
    out = out_wide[:, 8:]
    ik.rms_norm_fp8(x, w, scale, EPS, out=out)
    assert_fp8_close(out, quantise(rms_norm_rounded(x, w, EPS), 20.0))
    assert out_wide[:, :8].float().isnan().all(), "wrote outside the view"
    x3 = rand((2, 3, hidden), dtype, device)
    q, s = ik.rms_norm_fp8_dynamic(x3, w, EPS)
    assert s.shape == (2, 3, 1)
    assert_fp8_close(q, quantise(rms_norm_rounded(x3, w, EPS), 1.0 / s))


def test_fp8_saturates_and_keeps_nan(ik, device):
    x = torch.randn(3, 256, device=device)
    x[1] = float("nan")
    w = torch.ones(256, device=device)
    out = ik.rms_norm_fp8(x, w, torch.tensor([1e-4], device=device), EPS)
    o = out.float()
    assert o[1].isnan().all()
    rows = o[[0, 2]]
    assert (rows.abs() == FP8_MAX).float().mean() > 0.9, "large values must saturate to 448"
    assert torch.equal(rows.sign(), x[[0, 2]].sign())

    q, s = ik.rms_norm_fp8_dynamic(x, w, EPS)
    assert s[1].isnan().all() and not s[[0, 2]].isnan().any()


def test_fp8_dynamic_zero_row_uses_min_scale(ik, device):
    x = torch.randn(2, 64, device=device)
    x[0] = 0
    q, s = ik.rms_norm_fp8_dynamic(x, torch.ones(64, device=device), EPS)
    assert s[0].item() == pytest.approx(1 / (FP8_MAX * 512))
    assert (q[0].float() == 0).all()


# opcheck's schema test compares outputs with arithmetic torch does not implement
# for float8 ("mul_cpu_reduced_float" not implemented for 'Float8_e4m3fn'); the
# fake-tensor, autograd-registration and AOT-dispatch checks run.
OPCHECK_FP8 = ("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic")


def test_fp8_opcheck(ik, device):
    x = torch.randn(4, 130, device=device, dtype=torch.bfloat16)
    w = torch.randn(130, device=device, dtype=torch.bfloat16)
    r = torch.randn_like(x)
    scale = torch.tensor([0.1], device=device)
    out = torch.empty(x.shape, device=device, dtype=FP8)
    scales = torch.empty(4, 1, device=device)
    torch.library.opcheck(ik.ops.rms_norm_fp8, (out, x, w, scale, EPS, None), test_utils=OPCHECK_FP8)
    torch.library.opcheck(ik.ops.rms_norm_fp8, (out, x, w, scale, EPS, r.clone()), test_utils=OPCHECK_FP8)
    torch.library.opcheck(ik.ops.rms_norm_fp8_dynamic, (out, scales, x, w, EPS, None), test_utils=OPCHECK_FP8)
    torch.library.opcheck(ik.ops.rms_norm_fp8_dynamic, (out, scales, x, w, EPS, r.clone()), test_utils=OPCHECK_FP8)


def test_fp8_compile(ik, device):
    torch._dynamo.reset()

    def f(x, r, w, scale):
        q, s = ik.rms_norm_fp8_dynamic(x, w, EPS, residual=r)
        return ik.rms_norm_fp8(x, w, scale, EPS), q, s

    x = torch.randn(3, 512, device=device)
    w = torch.randn(512, device=device)
    scale = torch.tensor([0.05], device=device)
    r1, r2 = torch.randn_like(x), None
    r2 = r1.clone()
    eager = f(x, r1, w, scale)
    compiled = torch.compile(f, fullgraph=True)(x, r2, w, scale)
    assert torch.equal(r1, r2)
    for a, b in zip(eager, compiled):
        assert torch.equal(a.float(), b.float())


def test_fp8_errors(ik, device):
    x = torch.randn(4, 16, device=device)
    w = torch.randn(16, device=device)
    scale = torch.tensor([0.1], device=device)
    with pytest.raises(RuntimeError, match="out must be float8_e4m3fn, got Float"):
        ik.ops.rms_norm_fp8(torch.empty(4, 16, device=device), x, w, scale, EPS, None)
    with pytest.raises(RuntimeError, match="scale must be float32, got Half"):
        ik.rms_norm_fp8(x, w, scale.half(), EPS)
    with pytest.raises(RuntimeError, match="scale must have one element, got 2"):
        ik.rms_norm_fp8(x, w, torch.ones(2, device=device), EPS)
    with pytest.raises(RuntimeError, match="residual must have the shape of x"):
        ik.rms_norm_fp8(x, w, scale, EPS, residual=torch.randn(4, 15, device=device))
    with pytest.raises(RuntimeError, match="residual must have the dtype of x"):
        ik.rms_norm_fp8_dynamic(x, w, EPS, residual=torch.randn(4, 16, device=device).half())
    out = torch.empty(4, 16, device=device, dtype=FP8)
    with pytest.raises(RuntimeError, match=r"scales must have shape \[4, 1\], got \[4\]"):
        ik.ops.rms_norm_fp8_dynamic(out, torch.empty(4, device=device), x, w, EPS, None)
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        ik.rms_norm_fp8(x.double(), w.double(), scale, EPS)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("hidden", [4096, 8192])
@pytest.mark.parametrize("rows", [1, 3, 600])
def test_fp8_without_residual_exact_fit(ik, device, dtype, rows, hidden):
    """Both fp8 ops without the residual at 16-bit hidden 4096 and 8192 (on CUDA the flat
    exact fit at every row count, but at 8192 static fp8 below 128 rows and the dynamic
    scale below 64: the split rows),
    on every other row of a tensor, into a poisoned view."""
    x = rand((2 * rows, hidden), dtype, device)[::2]
    w = rand((hidden,), dtype, device)
    y = rms_norm_rounded(x, w, EPS)
    scale = (y.float().abs().amax() / 400).reshape(1)
    out_wide = fp8_poison((rows, hidden + 16), device)
    out = out_wide[:, 16:]
    ik.rms_norm_fp8(x, w, scale, EPS, out=out)
    assert_fp8_close(out, quantise(y, 1.0 / scale))
    assert out_wide[:, :16].float().isnan().all(), "wrote outside the view"
    q, scales = ik.rms_norm_fp8_dynamic(x, w, EPS)
    ref_scales = (y.float().abs().amax(-1, keepdim=True) / FP8_MAX).clamp_min(1 / (FP8_MAX * 512))
    assert_scales_close(scales, ref_scales, dtype)
    assert_fp8_close(q, quantise(y, 1.0 / scales))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("hidden,rows", [(16384, 3), (16384, 100), (16384, 130), (16384, 301), (8192, 40), (8192, 1030)])
def test_fp8_split_rows(ik, device, dtype, hidden, rows):
    """Both fp8 ops at 16-bit hidden 16384 and 8192 (on CUDA, static fp8 takes the split
    rows: a cluster of 8 blocks a row at 16384, 4 at 8192 below 128 rows and, with the
    residual, from 1024 rows; their sums exchanged between blocks; the dynamic scale the
    split rows below 64 rows, and at 16384 with the residual below 128, else the piped or
    flat exact fit), with and without the residual, on every other row of a tensor, into a
    poisoned view."""
    x = rand((2 * rows, hidden), dtype, device)[::2]
    r = rand((rows, hidden), dtype, device)
    w = rand((hidden,), dtype, device)
    for res in (None, r):
        s = x if res is None else x + res
        y = rms_norm_rounded(s, w, EPS)
        scale = (y.float().abs().amax() / 400).reshape(1)
        out_wide = fp8_poison((rows, hidden + 16), device)
        out = out_wide[:, 16:]
        rr = None if res is None else res.clone()
        ik.rms_norm_fp8(x, w, scale, EPS, residual=rr, out=out)
        if rr is not None:
            assert torch.equal(rr, s), "residual must be exactly x + residual in the dtype"
        assert_fp8_close(out, quantise(y, 1.0 / scale))
        assert out_wide[:, :16].float().isnan().all(), "wrote outside the view"
        rr = None if res is None else res.clone()
        q, scales = ik.rms_norm_fp8_dynamic(x, w, EPS, residual=rr)
        ref_scales = (y.float().abs().amax(-1, keepdim=True) / FP8_MAX).clamp_min(1 / (FP8_MAX * 512))
        assert_scales_close(scales, ref_scales, dtype)
        assert_fp8_close(q, quantise(y, 1.0 / scales))
