"""layer_norm against an fp64 reference and torch's F.layer_norm, through the built kernel;
the layer (nn.LayerNorm's replacement), opcheck, torch.compile and kernelize."""

import pytest
import torch
import torch.nn.functional as F

import isa
from reference import LAYOUT_SHAPES, assert_close, layer_norm_ref, poisoned_like, ulp_of, ulps_apart
from test_kernelize import count_calls, kernelize_with

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
HIDDEN = [1, 3, 127, 5120, 16385]
ROWS = [0, 1, 7]
EPS = 1e-5
AFFINE = ["weight+bias", "weight", "none"]


def rand(shape, dtype, device, offset=0.25):
    # Offset so rows have a non-zero mean: the kernel must subtract it.
    return (torch.randn(shape, dtype=torch.float32, device=device) + offset).to(dtype)


def affine(kind, hidden, dtype, device):
    w = rand((hidden,), dtype, device, 1.0) if kind != "none" else None
    b = rand((hidden,), dtype, device, 0.0) if kind == "weight+bias" else None
    return w, b


def assert_within_one_ulp_of_torch(out, x, w, b, eps, dtype):
    """torch computes in fp32 and rounds once; so do we, in another order: at most one
    ulp of the dtype apart, except where the fp32 results themselves differ by fp32
    rounding. That matters for outputs near zero: torch's CPU kernel computes
    x * rstd - mean * rstd, whose fp32 error scales with |x| * rstd, not with the output
    (the floor below, per element). The mean itself is an fp32 sum of d values of size
    ~rms(x): its error is absolute, ~sqrt(d) ulps of rms(x), however small |x| and
    |mean| are; without that term an element with x ~ mean ~ 0 failed (one run in a
    few dozen, 4271 ulps; 4473 elements over 4000 zero-mean rows of 127)."""
    ref = F.layer_norm(x, x.shape[-1:], w, b, eps)
    ulps = ulps_apart(out, ref, dtype)
    x64 = x.double().cpu()
    rstd = torch.rsqrt(x64.var(-1, unbiased=False, keepdim=True) + eps)
    rms = x64.pow(2).mean(-1, keepdim=True).sqrt()
    scale = (x64.abs() + x64.mean(-1, keepdim=True).abs() + rms) * rstd
    if w is not None:
        scale = scale * w.double().abs().cpu()
    if b is not None:
        scale = scale + b.double().abs().cpu()
    # Plus the fp32 summation error of the statistics (mean and variance over d terms,
    # summed in other orders by torch and by us): ~sqrt(d) fp32 ulps, relative. That is
    # far below an fp16/bf16 ulp, but for fp32 outputs it is the whole budget.
    d = x.shape[-1]
    floor = (8 + 2 * d ** 0.5) * torch.finfo(torch.float32).eps * scale
    ok = (ulps <= 1) | ((out.double() - ref.double()).abs().cpu() <= floor)
    assert ok.all(), f"{(~ok).sum().item()} elements over one ulp; worst {ulps.max().item():.1f} ulp"


@pytest.mark.parametrize("kind", AFFINE)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("rows", ROWS)
def test_layer_norm(ik, device, dtype, hidden, rows, kind):
    x = rand((rows, hidden), dtype, device)
    w, b = affine(kind, hidden, dtype, device)
    x_before = x.clone()
    out = poisoned_like(x)
    res = ik.layer_norm(x, w, b, EPS, out=out)
    assert res is out
    assert torch.equal(x, x_before), "layer_norm wrote to its input"
    if rows:
        assert_close(out, layer_norm_ref(x, w, b, EPS), dtype)
        assert_within_one_ulp_of_torch(out, x, w, b, EPS, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [256, 4096, 5120])
def test_layer_norm_matches_torch(ik, device, dtype, hidden):
    """Many rows of the shapes that matter, against F.layer_norm on the dtype."""
    x = rand((64, hidden), dtype, device)
    w, b = affine("weight+bias", hidden, dtype, device)
    assert_within_one_ulp_of_torch(ik.layer_norm(x, w, b, EPS), x, w, b, EPS, dtype)


def test_layer_norm_large_mean(ik, device):
    """Rows with |mean| >> std: two-pass statistics stay accurate where single-pass
    sum/sum-of-squares (E[x^2] - mean^2) would lose most digits of the variance."""
    hidden = 4096
    x = torch.randn(8, hidden, device=device, dtype=torch.float64)
    x = (x * 0.5 + 300.0).float()
    out = ik.layer_norm(x, None, None, EPS)
    ref = layer_norm_ref(x, None, None, EPS)
    err = ((out.double().cpu() - ref.cpu()).norm() / ref.norm().cpu()).item()
    assert err < 2e-4, f"relative error {err:.3g}"
    # What single-pass fp32 sum/sum-of-squares would give, for the record of why not.
    xf = x.float()
    var1 = (xf * xf).mean(-1, keepdim=True) - xf.mean(-1, keepdim=True) ** 2
    naive = (xf - xf.mean(-1, keepdim=True)) * torch.rsqrt(var1.clamp_min(0) + EPS)
    naive_err = ((naive.double().cpu() - ref.cpu()).norm() / ref.norm().cpu()).item()
    assert naive_err > err


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows", [3, 100, 200, 600, 673, 1025, 2049])
def test_layer_norm_large_mean_split_rows(ik, device, dtype, rows):
    """|mean| >> std at 16-bit hidden 16384 (the split rows: up to 143 rows each slice's
    mean and M2 merged by the pairwise update, from 144 the mean, then the squared
    deviations about it; two rows a cluster from 1024 rows in bf16 and past 2048 in fp16,
    at 1025 and 2049 the last cluster one): as accurate as the reference's rounding
    allows."""
    if device == "cpu" and rows in (673, 2049):
        pytest.skip("the CUDA layouts' bounds (7 s a case on the CPU)")
    x = (torch.randn(rows, 16384, device=device) * 0.5 + 100.0).to(dtype)
    w, b = affine("weight+bias", 16384, dtype, device)
    out = poisoned_like(x)
    ik.layer_norm(x, w, b, EPS, out=out)
    assert_close(out, layer_norm_ref(x, w, b, EPS), dtype)
    assert_within_one_ulp_of_torch(out, x, w, b, EPS, dtype)


@pytest.mark.parametrize("kind", AFFINE)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,hidden", LAYOUT_SHAPES)
def test_layer_norm_row_layouts(ik, device, dtype, rows, hidden, kind):
    x = rand((rows, hidden), dtype, device)
    w, b = affine(kind, hidden, dtype, device)
    out = poisoned_like(x)
    ik.layer_norm(x, w, b, EPS, out=out)
    assert_close(out, layer_norm_ref(x, w, b, EPS), dtype)
    assert_within_one_ulp_of_torch(out, x, w, b, EPS, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_3d_and_allocated_out(ik, device, dtype):
    x = rand((2, 5, 4096), dtype, device)
    w, b = affine("weight+bias", 4096, dtype, device)
    out = ik.layer_norm(x, w, b)
    assert out.shape == x.shape and out.is_contiguous()
    assert_close(out, layer_norm_ref(x, w, b, 1e-5), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [8, 4096, 5123])
def test_layer_norm_strided_rows(ik, device, dtype, hidden):
    """Columns [3:3+hidden] of a wider tensor (misaligned), and every other row."""
    wide = rand((11, hidden + 5), dtype, device)
    x = wide[:, 3:3 + hidden]
    w, b = affine("weight+bias", hidden, dtype, device)
    out_wide = poisoned_like(wide)
    out = out_wide[:, 1:1 + hidden]
    ik.layer_norm(x, w, b, EPS, out=out)
    assert_close(out, layer_norm_ref(x, w, b, EPS), dtype)
    assert out_wide[:, :1].isnan().all() and out_wide[:, 1 + hidden:].isnan().all(), \
        "wrote outside the view"

    x2 = rand((14, hidden), dtype, device)[::2]
    assert_close(ik.layer_norm(x2, w, b, EPS), layer_norm_ref(x2, w, b, EPS), dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows,hidden", [(150, 1024), (4000, 1024), (140, 2048), (200, 4096), (40, 8192), (5, 16384),
                                         (130, 16384), (170, 16384), (300, 16384), (400, 16384), (1025, 16384)])
def test_layer_norm_exact_fits_strided_and_in_place(ik, device, dtype, rows, hidden):
    """The 16-bit exact fits (flat at 1024 to 8192; at 16384 the split rows, 8 blocks a
    row up to 64 rows, 4 blocks of 2 vectors a thread to 143, of 4 to 1023 in bf16 and
    to 2048 in fp16; in bf16 from 1024 rows two rows a cluster) on every other row of a
    tensor, and in place."""
    x = rand((2 * rows, hidden), dtype, device)[::2]
    w, b = affine("weight+bias", hidden, dtype, device)
    out = poisoned_like(x)
    ik.layer_norm(x, w, b, EPS, out=out)
    assert_close(out, layer_norm_ref(x, w, b, EPS), dtype)
    assert_within_one_ulp_of_torch(out, x, w, b, EPS, dtype)
    y = x.contiguous()
    ref = layer_norm_ref(y, w, None, EPS)
    ik.layer_norm(y, w, None, EPS, out=y)
    assert_close(y, ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_misaligned_storage(ik, device, dtype):
    """A tensor, weight or bias starting one element into its storage: the scalar path."""
    hidden = 4096
    buf = rand((3 * hidden + 1,), dtype, device)
    x = buf[1:].view(3, hidden)
    w = rand((hidden + 1,), dtype, device)[1:]
    b = rand((hidden + 1,), dtype, device)[1:]
    assert_close(ik.layer_norm(x, w, b, EPS), layer_norm_ref(x, w, b, EPS), dtype)
    xa = rand((3, hidden), dtype, device)
    assert_close(ik.layer_norm(xa, w, None, EPS), layer_norm_ref(xa, w, None, EPS), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [5120, 40000])
def test_layer_norm_in_place(ik, device, dtype, hidden):
    """out=x, on a row held in registers (5120) and on a streamed one (40000)."""
    x = rand((6, hidden), dtype, device)
    w, b = affine("weight+bias", hidden, dtype, device)
    ref = layer_norm_ref(x, w, b, EPS)
    ik.layer_norm(x, w, b, EPS, out=x)
    assert_close(x, ref, dtype)


def test_layer_norm_eps_is_used(ik, device):
    x = rand((2, 64), torch.float32, device) * 1e-3
    out = ik.layer_norm(x, None, None, 1.0)
    assert_close(out, layer_norm_ref(x, None, None, 1.0), torch.float32)


def test_layer_norm_constant_row(ik, device):
    """var = 0: the output is exactly bias (x - mean is exactly 0 in fp32)."""
    x = torch.full((3, 100), 7.25, device=device)
    b = torch.randn(100, device=device)
    out = ik.layer_norm(x, torch.randn(100, device=device), b, EPS)
    assert torch.equal(out, b.expand_as(out))


# ---- errors: every bad input is refused with a message naming what was expected.

def test_layer_norm_rejects_bad_inputs(ik, device):
    x = torch.randn(4, 16, device=device)
    w = torch.randn(16, device=device)
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        ik.layer_norm(x.double(), None, None, EPS)
    with pytest.raises(RuntimeError, match=r"weight must have shape \[16\]"):
        ik.layer_norm(x, torch.randn(15, device=device), None, EPS)
    with pytest.raises(RuntimeError, match=r"bias must have shape \[16\]"):
        ik.layer_norm(x, w, torch.randn(4, 16, device=device), EPS)
    with pytest.raises(RuntimeError, match="bias must have the dtype of x"):
        ik.layer_norm(x, w, torch.randn(16, device=device, dtype=torch.float16), EPS)
    with pytest.raises(RuntimeError, match="weight must be contiguous"):
        ik.layer_norm(x, torch.randn(32, device=device)[::2], None, EPS)
    with pytest.raises(RuntimeError, match="out must have the shape of x"):
        ik.layer_norm(x, w, None, EPS, out=torch.empty(4, 17, device=device))
    with pytest.raises(RuntimeError, match="out must have the dtype of x"):
        ik.layer_norm(x, w, None, EPS, out=torch.empty(4, 16, device=device, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="eps must be non-negative"):
        ik.layer_norm(x, w, None, -1.0)
    with pytest.raises(RuntimeError, match="out must be x itself or not overlap it, got views that share some elements"):
        buf = torch.randn(65, device=device)
        ik.layer_norm(buf[:64].view(4, 16), None, None, EPS, out=buf[1:].view(4, 16))
    with pytest.raises(RuntimeError, match="contiguous in its last dimension"):
        ik.layer_norm(torch.randn(16, 4, device=device).t(), w, None, EPS)
    with pytest.raises(RuntimeError, match="cannot be viewed as one row dimension"):
        ik.layer_norm(torch.randn(3, 2, 16, device=device).transpose(0, 1), w, None, EPS)
    with pytest.raises(RuntimeError, match="at least one dimension"):
        ik.layer_norm(torch.tensor(1.0, device=device), None, None, EPS)


def test_layer_norm_rejects_wrong_device(ik, device):
    x = torch.randn(4, 16)
    if device == "cuda":
        with pytest.raises(RuntimeError, match="bias must be on the same device as x"):
            ik.layer_norm(x.cuda(), None, torch.randn(16), EPS)
        with pytest.raises(NotImplementedError):
            ik.layer_norm(x, None, None, EPS)
    else:
        with pytest.raises(RuntimeError, match="weight must be on the same device as x"):
            ik.layer_norm(x, torch.randn(16, device="meta"), None, EPS)


# ---- as torch sees it: opcheck, torch.compile, the layer, kernelize.

@pytest.mark.parametrize("kind", AFFINE)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_opcheck(ik, device, dtype, kind):
    x = rand((5, 257), dtype, device)
    w, b = affine(kind, 257, dtype, device)
    torch.library.opcheck(ik.ops.layer_norm, (torch.empty_like(x), x, w, b, EPS))


def layer_from(ik, norm: torch.nn.LayerNorm):
    """Our layer holding an nn.LayerNorm's attributes, as kernelize would see them."""
    layer = ik.layers.LayerNorm()
    layer.weight, layer.bias = norm.weight, norm.bias
    layer.eps, layer.normalized_shape = norm.eps, norm.normalized_shape
    return layer


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_torch_compile_fullgraph(ik, device, dtype):
    torch._dynamo.reset()
    norm = torch.nn.LayerNorm(384, device=device, dtype=dtype)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    proj = torch.nn.Linear(384, 384, device=device, dtype=dtype)
    model = torch.nn.Sequential(layer_from(ik, norm), proj).eval()
    x = rand((3, 7, 384), dtype, device)
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True)(x)
        fn = torch.compile(lambda t: ik.layer_norm(t, norm.weight, norm.bias, EPS), fullgraph=True)
        y = fn(x)
    torch.testing.assert_close(compiled, eager, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(y, ik.layer_norm(x, norm.weight, norm.bias, EPS), rtol=0, atol=0)


@pytest.mark.parametrize("elementwise_affine,bias", [(True, True), (True, False), (False, False)])
def test_layer_matches_nn_layer_norm(ik, device, elementwise_affine, bias):
    norm = torch.nn.LayerNorm(1000, eps=1e-6, elementwise_affine=elementwise_affine, bias=bias,
                              device=device)
    if elementwise_affine:
        with torch.no_grad():
            norm.weight.normal_()
            if bias:
                norm.bias.normal_()
    x = rand((4, 1000), torch.float32, device)
    with torch.no_grad():
        torch.testing.assert_close(layer_from(ik, norm)(x), norm(x), rtol=1e-5, atol=1e-5)


def test_layer_multi_dimensional_normalized_shape(ik, device):
    """normalized_shape (4, 50): the last two dimensions, flattened, as nn.LayerNorm."""
    norm = torch.nn.LayerNorm((4, 50), device=device)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    x = rand((3, 4, 50), torch.float32, device)
    layer = layer_from(ik, norm)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), norm(x), rtol=1e-5, atol=1e-5)
        with pytest.raises(ValueError, match="does not end in normalized_shape"):
            layer(rand((3, 50, 4), torch.float32, device))


def test_layer_contract(ik):
    """What `kernels` requires of a layer: no __init__, no extra members, nn.LayerNorm's forward."""
    import inspect

    cls = ik.layers.LayerNorm
    assert cls.__init__ is torch.nn.Module.__init__
    assert cls.can_torch_compile is True and cls.has_backward is False
    ours = list(inspect.signature(cls.forward).parameters)
    assert ours == list(inspect.signature(torch.nn.LayerNorm.forward).parameters)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernelize_layer_norm(ik, device, dtype):
    """nn.LayerNorm marked for the Hub (on a subclass, so torch's own class stays as it is)."""
    from kernels import replace_kernel_forward_from_hub

    class HubLayerNorm(torch.nn.LayerNorm):
        pass

    replace_kernel_forward_from_hub(HubLayerNorm, "LayerNorm")
    model = torch.nn.Sequential(torch.nn.Linear(320, 320), HubLayerNorm(320),
                                torch.nn.GELU(), HubLayerNorm(320, bias=False))
    model = model.to(device=device, dtype=dtype).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, HubLayerNorm):
                m.weight.normal_()
                if m.bias is not None:
                    m.bias.normal_()
    x = rand((2, 9, 320), dtype, device)
    first = {}
    model[1].register_forward_hook(lambda m, i, o: first.__setitem__(len(first), o))
    with torch.no_grad():
        ref = model(x)
    kernelize_with(model, device, LayerNorm="LayerNorm")
    y, calls = count_calls(ik.ops.layer_norm.default, lambda: model(x))
    assert calls == 2, f"our layer_norm ran {calls} times for 2 LayerNorm modules"
    if dtype == torch.float32:
        torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    else:
        # The first LayerNorm sees the same input either way: against fp64, one ulp (the
        # output's rounding) plus fp32 rounding of its terms x_hat * w and b, which an
        # output that cancels to near 0 shows as many of its own ulps (3 ulps from torch's
        # bf16 output once on the H200). The second sees that output after GELU, where a
        # one-ulp change of an input near the row's mean is many ulps of a small output:
        # bound the chain's error by a few ulps of the largest output instead.
        m = model[1]
        with torch.no_grad():
            h = model[0](x)
        exact = layer_norm_ref(h, m.weight, m.bias, m.eps).cpu()
        terms = (layer_norm_ref(h, None, None, m.eps) * m.weight.double()).abs() + m.bias.double().abs()
        excess = (first[1].double().cpu() - exact).abs() - ulp_of(exact, dtype) - 16 * 2.0**-24 * terms.cpu()
        assert excess.max().item() <= 0, f"first LayerNorm: an element {excess.max().item():.3g} past its budget"
        eps = torch.finfo(dtype).eps
        assert (y.float() - ref.float()).abs().max().item() <= 4 * eps * ref.float().abs().max().item()


@pytest.mark.parametrize("name", isa.ISAS)
def test_every_isa(ik, device, name):
    """This file's CPU cases again under every instruction set below the CPU's best:
    layer_norm has an AVX2 and an AVX-512 build of its row loops (cpu_kernels/row_simd.h)."""
    isa.skip_unless_parent(device)
    # The op's numeric cases (not the layer, opcheck, compile and kernelize ones, nor the
    # GPU row layouts' large shapes, whose fp64 references take most of the time).
    isa.rerun_under(ik, name, "test_layer_norm.py", "cpu and test_layer_norm_ and not rejects and not row_layouts",
                    3 * 5 * 3)
