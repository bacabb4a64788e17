"""The tiled layouts (tile_q4k / tile_q6k and their inverses, common/ggml_blocks.h): the
byte maps, the round trip, and the gemvs on tiled bytes, which must give the same sums as
on ggml's rows, bit for bit (CUDA reads them natively; the CPU backend untiles first).

On CUDA the sizes cover the launcher's paths (K splits with the x-ahead loop for bf16
and the direct loop for fp16/fp32; one warp a tile when no split fits one wave, where
Q4_K tiles with fp16/bf16 x go through the staged loop as rows do, with fewer blocks
than stages at K = 256), odd N (the last tile's rows are zero padding, never stored),
every M, and the error paths.
"""

import contextlib
import warnings

import pytest
import torch

from reference import KQUANT_BYTES as SIZE, POISON, assert_close_dot, random_kquant

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
FMTS = ["Q4_K", "Q6_K"]


def random_q(n, k, fmt="Q4_K"):
    return random_kquant(n, k, fmt)


def tile(ik, q, fmt):
    return ik.tile_q4k(q) if fmt == "Q4_K" else ik.tile_q6k(q)


def untile(ik, qt, n, fmt):
    return ik.untile_q4k(qt, n) if fmt == "Q4_K" else ik.untile_q6k(qt, n)


def gemv(ik, fmt):
    return ik.q4k_gemv if fmt == "Q4_K" else ik.q6k_gemv


@contextlib.contextmanager
def tiled_calls(device):
    """Every backend but CUDA untiles tiled weights on each call, and says so."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield
    untiled = [w for w in seen if "untiled on every call" in str(w.message)]
    assert bool(untiled) == (device != "cuda"), [str(w.message) for w in seen]


def test_byte_map(ik):
    # The map of ggml_blocks.h, one byte at a time: qs byte 32c + 8t + e of tile row
    # 8h + g at 512c + 16(4g + t) + 8h + e', where e' swaps each word's bytes 1 and 2
    # (words hold bytes 0, 2, 1, 3); row r's 16 head bytes at 2048 + 16r.
    n, k = 19, 512
    q = random_q(n, k)
    qt = ik.tile_q4k(q)
    assert qt.shape == (2, 2, 2304) and qt.dtype == torch.uint8
    for tile in range(2):
        for b in range(2):
            for r in range(16):
                row = tile * 16 + r
                src = q[row, 144 * b:144 * (b + 1)] if row < n else torch.zeros(144, dtype=torch.uint8)
                assert torch.equal(qt[tile, b, 2048 + 16 * r:2048 + 16 * r + 16], src[:16])
                h, g = divmod(r, 8)
                for c in range(4):
                    for t in range(4):
                        at = 512 * c + 16 * (4 * g + t) + 8 * h
                        qs = src[16 + 32 * c + 8 * t:16 + 32 * c + 8 * t + 8]
                        assert torch.equal(qt[tile, b, at:at + 8], qs[[0, 2, 1, 3, 4, 6, 5, 7]])


def test_byte_map_q6k(ik):
    # ggml_blocks.h: lane i = 4g + t's word w = 12R + 6n + 3h + k of tile row 8R + g at
    # 512 (w / 4) + 16i + 4 (w % 4); scales at 3072 + 16r, d at 3328 + 2r.
    n, k = 21, 256
    q = random_q(n, k, "Q6_K")
    qt = ik.tile_q6k(q)
    assert qt.shape == (2, 1, 3360)
    for tile_ in range(2):
        for r in range(16):
            row = tile_ * 16 + r
            src = q[row] if row < n else torch.zeros(210, dtype=torch.uint8)
            assert torch.equal(qt[tile_, 0, 3072 + 16 * r:3088 + 16 * r], src[192:208])
            assert torch.equal(qt[tile_, 0, 3328 + 2 * r:3330 + 2 * r], src[208:210])
            big, g = divmod(r, 8)
            for t in range(4):
                for nn in range(2):
                    for h in range(2):
                        for kind, off in enumerate((64 * nn + 16 * h, 64 * nn + 32 + 16 * h, 128 + 32 * nn + 16 * h)):
                            w = 12 * big + 6 * nn + 3 * h + kind
                            at = 512 * (w // 4) + 16 * (4 * g + t) + 4 * (w % 4)
                            assert torch.equal(qt[tile_, 0, at:at + 4], src[off + 4 * t:off + 4 * t + 4])


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("n", [1, 15, 16, 17, 300])
def test_round_trip(ik, device, fmt, n):
    q = random_q(n, 768, fmt).to(device)
    qt = tile(ik, q, fmt)
    assert qt.device == q.device and qt.shape == ((n + 15) // 16, 3, 16 * SIZE[fmt])
    assert torch.equal(untile(ik, qt, n, fmt), q)


@pytest.mark.parametrize("fmt", FMTS)
def test_tiles_concatenate(ik, device, fmt):
    # A fused projection (q, k, v as one weight, as bench_q4k_layer.py times it): tiles of
    # weights whose rows are a multiple of 16 concatenate along dim 0 into the tiles of
    # the stacked rows, and one gemv over them equals the rows' gemv, bit for bit.
    parts = [random_q(n, 512, fmt).to(device) for n in (32, 16, 48)]
    fused = torch.cat([tile(ik, q, fmt) for q in parts])
    rows = torch.cat(parts)
    assert torch.equal(fused, tile(ik, rows, fmt))
    x = torch.randn(2, 512, device=device).to(torch.float16)
    with tiled_calls(device):
        y = gemv(ik, fmt)(x, fused, rows.shape[0])
    torch.testing.assert_close(y, gemv(ik, fmt)(x, rows), rtol=0, atol=0)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 3, 8])
@pytest.mark.parametrize("n,k", [(1, 256), (17, 512), (129, 1280)])
def test_gemv_tiled_equals_rows(ik, device, fmt, dtype, m, n, k):
    q = random_q(n, k, fmt).to(device)
    x = torch.randn(m, k, device=device).to(dtype)
    rows = gemv(ik, fmt)(x, q)
    with tiled_calls(device):
        tiled = gemv(ik, fmt)(x, tile(ik, q, fmt), n)
    assert tiled.shape == (m, n) and tiled.dtype == dtype
    torch.testing.assert_close(tiled, rows, rtol=0, atol=0)
    w = (ik.dequantize_q4_k if fmt == "Q4_K" else ik.dequantize_q6_k)(q.cpu()).double()
    assert_close_dot(tiled, x, w, dtype)


@pytest.mark.parametrize("fmt", FMTS)
def test_gemv_tiled_default_n_is_every_tile_row(ik, device, fmt):
    q = random_q(32, 256, fmt).to(device)
    x = torch.randn(2, 256, device=device)
    with tiled_calls(device):
        tiled = gemv(ik, fmt)(x, tile(ik, q, fmt))
    torch.testing.assert_close(tiled, gemv(ik, fmt)(x, q), rtol=0, atol=0)


def test_tiled_rejects_bad_arguments(ik, device):
    q = random_q(20, 512).to(device)
    qt = ik.tile_q4k(q)
    x = torch.randn(2, 512, device=device)
    with pytest.raises(ValueError, match=r"tiled Q4_K bytes for N = 40 are uint8 \[3, K / 256, 2304\]"):
        ik.q4k_gemv(x, qt, 40)
    with pytest.raises(ValueError, match=r"tiled Q4_K bytes for N = 20 are uint8 \[2, K / 256, 2304\]"):
        ik.q4k_gemv(x, qt[..., :2000], 20)
    with pytest.raises(ValueError, match=r"tiled Q6_K bytes for N = 32 are uint8 \[2, K / 256, 3360\]"):
        ik.q6k_gemv(x, qt)
    with pytest.raises(ValueError, match="n=7 does not match the 20 rows"):
        ik.q4k_gemv(x, q, 7)
    with pytest.raises(ValueError, match=r"a Q4_K weight is uint8 \[N, K / 256 \* 144\]"):
        ik.tile_q4k(q[:, :100])


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")


def run_op(ik, x, qt, n, fmt="Q4_K"):
    """The CUDA op itself into a poisoned output (every element must be written)."""
    out = torch.full((x.shape[0], n), POISON, dtype=x.dtype, device="cuda")
    getattr(ik.ops, "q4k_gemv" if fmt == "Q4_K" else "q6k_gemv")(out, x, qt)
    return out


@cuda
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", range(1, 9))
@pytest.mark.parametrize("n,k", [(1, 256), (129, 4352), (1003, 256), (2051, 512), (4096, 4096)])
def test_cuda_tiled_bit_equal_to_rows(ik, fmt, dtype, m, n, k):
    q = random_q(n, k, fmt).cuda()
    x = torch.randn(m, k, device="cuda").to(dtype)
    rows = run_op(ik, x, q, n, fmt)
    torch.testing.assert_close(run_op(ik, x, tile(ik, q, fmt), n, fmt), rows, rtol=0, atol=0)


@cuda
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 4, 8])
def test_cuda_tiled_many_tiles(ik, fmt, dtype, m):
    # 1064 tiles over 5 blocks: no K split fits one wave, one warp a tile (Q4_K with
    # fp16/bf16 x: the staged loop, two tile blocks ahead; otherwise the direct one).
    n, k = 17011, 1280
    q = random_q(n, k, fmt)
    x = torch.randn(m, k, device="cuda").to(dtype)
    w = (ik.dequantize_q4_k if fmt == "Q4_K" else ik.dequantize_q6_k)(q).double()
    got = run_op(ik, x, tile(ik, q.cuda(), fmt), n, fmt)
    assert_close_dot(got, x, w, dtype)
    torch.testing.assert_close(got, run_op(ik, x, q.cuda(), n, fmt), rtol=0, atol=0)


@cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_tiled_strided_x(ik, dtype):
    # x rows a stride apart, read in place (fp16, m <= 4: each block's x copied into the
    # stages from its rows), equal to ggml's rows bit for bit and close to fp64.
    n, k = 300, 2048
    q = random_q(n, k).cuda()
    qt = ik.tile_q4k(q)
    w = ik.dequantize_q4_k(q.cpu()).double()
    views = {
        "aligned row stride": torch.randn(3, k + 64, device="cuda").to(dtype)[:, 32:32 + k],
        "every other row": torch.randn(4, k, device="cuda").to(dtype)[::2],
        "row stride k + 8, four rows": torch.randn(4, k + 8, device="cuda").to(dtype)[:, :k],
    }
    for name, x in views.items():
        got = run_op(ik, x, qt, n)
        try:
            torch.testing.assert_close(got, run_op(ik, x, q, n), rtol=0, atol=0)
            assert_close_dot(got, x, w, dtype)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


@cuda
def test_cuda_tiled_graph_replay(ik):
    q = random_q(300, 1024).cuda()
    qt, x = ik.tile_q4k(q), torch.randn(2, 1024, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(2, 300, device="cuda", dtype=torch.bfloat16)
    ik.ops.q4k_gemv(out, x, qt)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ik.ops.q4k_gemv(out, x, qt)
    x.copy_(torch.randn_like(x))
    out.fill_(POISON)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, ik.q4k_gemv(x, q), rtol=0, atol=0)


@cuda
def test_cuda_tiled_op_rejects_bad_arguments(ik):
    q = random_q(20, 512).cuda()
    qt, x = ik.tile_q4k(q), torch.randn(2, 512, device="cuda")
    op = ik.ops.q4k_gemv

    def raises(match, out_, q_, op_=op):
        with pytest.raises(RuntimeError, match=match):
            op_(out_, x, q_)

    out = torch.empty(2, 20, device="cuda")
    raises(r"for N = 20 \(out's columns\) must have 2 tiles of 16 rows, got 3", out, torch.cat([qt, qt[:1]]))
    raises(r"tiled Q4_K must have shape \[ceil\(N / 16\), K / 256, 2304\]", out, qt[..., :2288].contiguous())
    raises("q must be contiguous", out, qt.transpose(0, 1))
    raises("x must have K = 256 columns", out, ik.tile_q4k(random_q(20, 256).cuda()))
    raises("out must be 2-D", torch.empty(40, device="cuda"), qt)
    raises(r"tiled Q6_K must have shape \[ceil\(N / 16\), K / 256, 3360\]", out, qt, ik.ops.q6k_gemv)
    raises(r"or the tiled layout \[ceil\(N / 16\), K / 256, 2304\], got shape", out, qt.reshape(-1))
    base = torch.empty(qt.numel() + 8, dtype=torch.uint8, device="cuda")
    raises("aligned to 16 bytes", out, base[8:].view(qt.shape))


@cuda
@pytest.mark.parametrize("fmt", FMTS)
def test_cuda_tiled_opcheck(ik, fmt):
    qt = tile(ik, random_q(21, 512, fmt).cuda(), fmt)
    op = ik.ops.q4k_gemv if fmt == "Q4_K" else ik.ops.q6k_gemv
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(3, 512, device="cuda", dtype=dtype)
        torch.library.opcheck(op, (torch.empty(3, 21, device="cuda", dtype=dtype), x, qt))


def test_q4klinear_tile_(ik, device):
    lin = torch.nn.Linear(512, 37, bias=True)
    layer = ik.quant.Q4KLinear.from_linear(lin, "Q4_K").to(device)
    x = torch.randn(3, 512, device=device)
    before, weight = layer(x), layer.dequantized_weight()
    rows = layer.qweight.clone()
    assert layer.tile_() is layer and layer.tiled and layer.qweight.shape == (3, 2, 2304)
    assert "tiled=True" in repr(layer)
    with tiled_calls(device):
        torch.testing.assert_close(layer(x), before, rtol=0, atol=0)  # the gemv, M <= 8
    assert layer(torch.randn(9, 512, device=device)).shape == (9, 37)  # dequantise + matmul
    assert torch.equal(layer.rows_qweight(), rows) and torch.equal(layer.dequantized_weight(), weight)
    layer.tile_()  # twice: a no-op
    assert layer.qweight.shape == (3, 2, 2304)
    q6 = ik.quant.Q4KLinear.from_linear(lin, "Q6_K").to(device)
    before = q6(x)
    assert q6.tile_().qweight.shape == (3, 2, 3360)
    with tiled_calls(device):
        torch.testing.assert_close(q6(x), before, rtol=0, atol=0)


def test_quantize_model_q4_k_m_tile(ik, device):
    def model():
        torch.manual_seed(1)
        return torch.nn.Sequential(torch.nn.Linear(256, 272), torch.nn.ReLU(), torch.nn.Linear(272, 64)).to(device)

    rows, tiled = model(), model()
    with pytest.warns(UserWarning, match="stays unquantised"):  # the 272-column layer
        report = ik.quant.quantize_model_q4_k_m(rows)
    with pytest.warns(UserWarning, match="stays unquantised"):
        assert ik.quant.quantize_model_q4_k_m(tiled, tile=True) == report
    assert report["0"] == "Q4_K" and tiled[0].tiled and not rows[0].tiled
    x = torch.randn(2, 256, device=device)
    with tiled_calls(device):
        out = tiled(x)
    torch.testing.assert_close(out, rows(x), rtol=0, atol=0)
