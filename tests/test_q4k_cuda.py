"""q4k_gemv / q6k_gemv on CUDA, against an fp64 product with the dequantised weight and
against the CPU kernel (the CUDA variant carries the CPU k-quant ops). Skips without a GPU.

Weights are either quantised Gaussians (the CPU quantiser) or random bytes with finite
scales (every bit pattern of levels, scales and mins). Sizes cover the launcher's K
splits (8 warps over 17 blocks: uneven ranges, the prefetching loop and its last block;
one warp per tile when K is one block), odd N (the last 16-row tile's rows clamp), K of
one block and of 17 blocks (odd: Q6_K rows alternate 4-aligned and 2 mod 4), every M
(B columns past M repeat row M - 1 and are not stored), and strided or misaligned x.
Q4_K with fp16/bf16 x has two loops (cuda_kernels/q4k.cu): K of one block and N past
one wave of split tiles (> 16896 rows on an H200) take the staged one.
"""

import pytest
import torch

from reference import KQUANT_BYTES, POISON, TOL, assert_close, assert_close_dot, random_kquant

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU here", allow_module_level=True)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
BYTES = KQUANT_BYTES
GEMV = {"Q4_K": "q4k_gemv", "Q6_K": "q6k_gemv"}


@pytest.fixture(scope="module")
def ik_cuda(ik):
    if not hasattr(ik.ops, "q4k_gemv"):
        pytest.skip("this build has no k-quant ops")
    return ik


def make_q(ik, n, k, fmt, kind):
    if kind == "random bytes":
        return random_kquant(n, k, fmt)
    quantize = ik.quantize_q4_k if fmt == "Q4_K" else ik.quantize_q6_k
    return quantize(torch.randn(n, k))  # CPU quantiser


def dequant_cpu(ik, q, fmt):
    return (ik.dequantize_q4_k if fmt == "Q4_K" else ik.dequantize_q6_k)(q.cpu())


def run(ik, fmt, x, q):
    """The op into a poisoned output: every element must be written."""
    out = torch.full((x.shape[0], q.shape[0]), POISON, dtype=x.dtype, device=x.device)
    getattr(ik.ops, GEMV[fmt])(out, x, q)
    return out


@pytest.mark.parametrize("fmt", ["Q4_K", "Q6_K"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", range(1, 9))
@pytest.mark.parametrize("n,k", [(1, 256), (129, 4352), (1003, 256), (2051, 512)])
def test_gemv_matches_fp64(ik_cuda, fmt, dtype, m, n, k):
    kind = "random bytes" if (m + n) % 2 else "quantised"
    q = make_q(ik_cuda, n, k, fmt, kind)
    w = dequant_cpu(ik_cuda, q, fmt).double()
    x = torch.randn(m, k, device="cuda").to(dtype)
    out = run(ik_cuda, fmt, x, q.cuda())
    assert out.shape == (m, n) and out.dtype == dtype
    assert_close_dot(out, x, w, dtype)
    # The public wrapper allocates the output itself.
    fn = ik_cuda.q4k_gemv if fmt == "Q4_K" else ik_cuda.q6k_gemv
    torch.testing.assert_close(fn(x, q.cuda()), out, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 4, 8])
def test_many_tiles(ik_cuda, dtype, m):
    # 1064 tiles of 16 rows (the last one of 3) over 5 blocks: no K split fits one wave
    # on an H200, so each warp streams its rows' whole K (Q4_K: the staged loop).
    n, k = 17011, 1280
    for fmt in ("Q4_K", "Q6_K"):
        q = make_q(ik_cuda, n, k, fmt, "random bytes")
        w = dequant_cpu(ik_cuda, q, fmt).double()
        x = torch.randn(m, k, device="cuda").to(dtype)
        assert_close_dot(run(ik_cuda, fmt, x, q.cuda()), x, w, dtype)


@pytest.mark.parametrize("fmt", ["Q4_K", "Q6_K"])
@pytest.mark.parametrize("m", [1, 2, 3, 5, 8])
def test_gemv_large_n_all_row_paths(ik_cuda, fmt, m):
    # 8195 rows: 513 tiles of one warp (K = 256), the last tile 3 rows.
    q = make_q(ik_cuda, 8195, 256, fmt, "random bytes")
    w = dequant_cpu(ik_cuda, q, fmt).double()
    x = torch.randn(m, 256, device="cuda")
    assert_close_dot(run(ik_cuda, fmt, x, q.cuda()), x, w, torch.float32)


@pytest.mark.parametrize("fmt", ["Q4_K", "Q6_K"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemv_matches_cpu_kernel(ik_cuda, fmt, dtype):
    q = make_q(ik_cuda, 301, 1280, fmt, "quantised")
    x = torch.randn(4, 1280).to(dtype)
    cpu = getattr(ik_cuda, GEMV[fmt])(x, q)
    gpu = run(ik_cuda, fmt, x.cuda(), q.cuda()).cpu()
    # Both sum in fp32 in different orders: within the dtype's budget of each other.
    err = ((gpu.double() - cpu.double()).norm() / cpu.double().norm()).item()
    assert err < TOL[dtype], f"GPU vs CPU kernel: relative difference {err:.3g}"


@pytest.mark.parametrize("fmt", ["Q4_K", "Q6_K"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_and_misaligned_x(ik_cuda, fmt, dtype):
    k, n = 768, 77
    q = make_q(ik_cuda, n, k, fmt, "random bytes")
    w = dequant_cpu(ik_cuda, q, fmt).double()
    wide = torch.randn(6, k + 9, device="cuda").to(dtype)
    views = {
        "row stride k + 9 (misaligned rows: copied)": wide[:, :k],
        "one element in (misaligned start: copied)": wide[:, 1:k + 1],
        "aligned row stride": torch.randn(3, k + 64, device="cuda").to(dtype)[:, 32:32 + k],
        "every other row": torch.randn(8, k, device="cuda").to(dtype)[::2],
        "stride-0 rows (expand)": torch.randn(1, k, device="cuda").to(dtype).expand(5, k),
    }
    for name, x in views.items():
        out = run(ik_cuda, fmt, x, q.cuda())
        try:
            assert_close_dot(out, x, w, dtype)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


def test_q6k_view_starting_two_bytes_into_a_word(ik_cuda):
    # K = 256: 210-byte rows, so q[1:] starts 2 mod 4 (allowed: 2-aligned, like the CPU).
    q = make_q(ik_cuda, 9, 256, "Q6_K", "random bytes").cuda()
    view = q[1:]
    assert view.data_ptr() % 4 == 2
    x = torch.randn(2, 256, device="cuda")
    w = dequant_cpu(ik_cuda, view, "Q6_K").double()
    assert_close_dot(run(ik_cuda, "Q6_K", x, view), x, w, torch.float32)


@pytest.mark.parametrize("fmt", ["Q4_K", "Q6_K"])
def test_cuda_graph_replay(ik_cuda, fmt):
    q = make_q(ik_cuda, 515, 1024, fmt, "random bytes").cuda()
    w = dequant_cpu(ik_cuda, q, fmt).double()
    x = torch.randn(3, 1024, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(3, 515, device="cuda", dtype=torch.bfloat16)
    op = getattr(ik_cuda.ops, GEMV[fmt])
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        op(out, x, q)  # warm-up off the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        op(out, x, q)
    x.copy_(torch.randn(3, 1024, device="cuda"))
    out.fill_(POISON)
    g.replay()
    torch.cuda.synchronize()
    assert_close_dot(out, x, w, torch.bfloat16)


@pytest.mark.parametrize("fmt", ["Q4_K", "Q6_K"])
def test_torch_dequantize_on_gpu_matches_cpu_kernel(ik_cuda, fmt):
    """quant.dequantize on a CUDA tensor (plain torch, what Q4KLinear's prefill path and
    the benchmark's dequantise-then-matmul use) equals the CPU kernel bit for bit."""
    q = make_q(ik_cuda, 37, 512, fmt, "random bytes")
    assert torch.equal(ik_cuda.quant.dequantize(q.cuda(), fmt).cpu(), dequant_cpu(ik_cuda, q, fmt))


@pytest.mark.parametrize("fmt", ["Q4_K", "Q6_K"])
def test_q4klinear_on_cuda(ik_cuda, fmt):
    lin = torch.nn.Linear(512, 40, bias=True)
    mod = ik_cuda.quant.Q4KLinear.from_linear(lin, fmt).cuda()
    assert mod.qweight.is_cuda
    w = dequant_cpu(ik_cuda, mod.qweight, fmt).double()
    x = torch.randn(2, 9, 512, device="cuda")
    ref = x.double().cpu() @ w.T + lin.bias.double()
    assert_close(mod(x), ref, torch.float32)              # 18 rows: dequantise + matmul
    assert_close(mod(x[:, :4]), ref[:, :4], torch.float32)  # 8 rows: the gemv


@pytest.mark.parametrize("fmt", ["Q4_K", "Q6_K"])
def test_rejects_bad_arguments(ik_cuda, fmt):
    op = getattr(ik_cuda.ops, GEMV[fmt])
    size = BYTES[fmt]
    q = make_q(ik_cuda, 4, 512, fmt, "random bytes").cuda()
    x = torch.randn(2, 512, device="cuda")
    out = torch.empty(2, 4, device="cuda")

    def raises(match, out_, x_, q_):
        with pytest.raises(RuntimeError, match=match):
            op(out_, x_, q_)

    raises("x must be float32, float16 or bfloat16, got Double", out.double(), x.double(), q)
    raises("must be a multiple of 256", torch.empty(2, 4, device="cuda"), torch.randn(2, 300, device="cuda"), q)
    raises("x must have K = 512 columns", out, torch.randn(2, 256, device="cuda"), q)
    raises("x must have 1 to 8 rows", torch.empty(9, 4, device="cuda"), torch.randn(9, 512, device="cuda"), q)
    raises("x must have 1 to 8 rows", torch.empty(0, 4, device="cuda"), torch.randn(0, 512, device="cuda"), q)
    raises("x must be 2-D", out, x.reshape(2, 2, 256), q)
    raises("contiguous in its last dimension", torch.empty(2, 4, device="cuda"),
           torch.randn(512, 2, device="cuda").T, q)
    raises("q must be uint8", out, x, q.to(torch.int8))
    raises(rf"q must have shape \[N, K / 256 \* {size}\]", out, x, q[:, 1:].contiguous())
    raises("q must be contiguous", out, x, torch.cat([q, q], 1)[:, :2 * size])
    raises("q must be on the same device as x", out, x, q.cpu())
    raises("out must have the dtype of x", out.half(), x, q)
    raises(r"out must have shape \[2, 4\]", torch.empty(2, 5, device="cuda"), x, q)
    raises("out must be contiguous", torch.empty(4, 2, device="cuda").T, x, q)
    raises("x must be a CUDA tensor", out, x.cpu(), q)
    if fmt == "Q4_K":  # 16-byte loads: a view 8 bytes into the storage is refused
        base = torch.empty(4 * 2 * size + 8, dtype=torch.uint8, device="cuda")
        raises("aligned to 16 bytes", out, x, base[8:].view(4, 2 * size))
    else:
        base = torch.empty(4 * 2 * size + 1, dtype=torch.uint8, device="cuda")
        raises("aligned to 2 bytes", out, x, base[1:].view(4, 2 * size))


@pytest.mark.parametrize("fmt", ["Q4_K", "Q6_K"])
def test_opcheck_cuda(ik_cuda, fmt):
    q = make_q(ik_cuda, 5, 512, fmt, "random bytes").cuda()
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(3, 512, device="cuda", dtype=dtype)
        torch.library.opcheck(getattr(ik_cuda.ops, GEMV[fmt]),
                              (torch.empty(3, 5, device="cuda", dtype=dtype), x, q))
