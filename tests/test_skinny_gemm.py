"""skinny_gemm_fp8 and fp8_linear through the built kernel: against an fp64 matmul of the
dequantised fp8 operands (relative error of every output row under 1e-2), odd sizes,
K tails, strided and misaligned operands, both output dtypes, per-tensor and
per-channel weight scales, bias; the M > 32 route to torch._scaled_mm (CUDA); CUDA
graphs; every error path."""

import os

import pytest
import torch

FP8 = torch.float8_e4m3fn
ROW_TOL = 1e-2
# M 1-8 (one n-tile), 9-32 (two to four n-tiles), > 32 (slices of 32 rows). By default on
# CUDA, 2317 x 1040 takes convert 6 at M <= 32; the narrower weights (N < 1024) convert 1,
# and K % 16 != 0 the byte path.
MS = [1, 2, 7, 8, 9, 12, 16, 17, 24, 25, 31, 32, 33, 64]
# (N, K): odd N, K % 64 != 0 (a last partial chunk), K % 16 != 0 (the byte path), K < 64.
SHAPES = [(129, 4096), (2304 + 13, 1040), (64, 80), (40, 4099), (17, 16)]
OUT_DTYPES = [torch.bfloat16, torch.float16]


def rand_fp8(shape, device, std=3.0):
    # Values over most of e4m3's exponent range (including subnormals near 0).
    return (torch.randn(shape, device=device) * std).clamp(-448, 448).to(FP8)


def scales(n, device, per_channel):
    sa = (torch.rand(1, device=device) + 0.5) / 16
    sb = (torch.rand(n if per_channel else 1, device=device) + 0.5) / 16
    return sa, sb


def reference(a, b, sa, sb, bias=None):
    y = (a.double() @ b.double().T) * sa.double() * sb.double().reshape(1, -1)
    return y if bias is None else y + bias.double()


def strided_operands(m, n, k, device):
    """a [m, k] and b [n, k] as column slices of wider tensors (row strides past K), and
    per-channel scales."""
    a = rand_fp8((m, k + 48), device)[:, :k]
    b = rand_fp8((n, k + 16), device)[:, :k]
    return (a, b) + scales(n, device, True)


def poisoned(m, n, dtype, device):
    return torch.full((m, n), float("nan"), dtype=dtype, device=device)


def assert_rows_close(out, ref, dtype):
    assert out.dtype == dtype
    assert torch.isfinite(out).all(), "non-finite output (an element left unwritten?)"
    o, r = out.double().cpu(), ref.double().cpu()
    err = ((o - r).norm(dim=1) / r.norm(dim=1).clamp_min(1e-30)).max().item()
    assert err < ROW_TOL, f"worst row relative error {err:.3g} over {ROW_TOL}"


# ---- correctness over M, shapes, dtypes, scales and bias.

@pytest.mark.parametrize("m", MS)
@pytest.mark.parametrize("n,k", SHAPES)
def test_skinny_gemm(ik, device, m, n, k):
    a, b = rand_fp8((m, k), device), rand_fp8((n, k), device)
    for i, dtype in enumerate(OUT_DTYPES):
        per_channel = (m + i) % 2 == 0
        sa, sb = scales(n, device, per_channel)
        bias = torch.randn(n, device=device).to(dtype) if (m + i) % 3 else None
        out = poisoned(m, n, dtype, device)
        y = ik.skinny_gemm_fp8(a, b, sa, sb, out_dtype=dtype, bias=bias, out=out)
        assert y is out
        assert_rows_close(out, reference(a, b, sa, sb, bias), dtype)


@pytest.mark.parametrize("dtype", OUT_DTYPES)
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_large_k_and_n(ik, device, dtype, per_channel, bias):
    """The benchmark's shapes in miniature on the CPU, in full on the GPU."""
    n, k = (2304, 16384) if device == "cuda" else (96, 16384)
    a, b = rand_fp8((5, k), device), rand_fp8((n, k), device)
    sa, sb = scales(n, device, per_channel)
    bv = torch.randn(n, device=device).to(dtype) if bias else None
    out = ik.skinny_gemm_fp8(a, b, sa, sb, out_dtype=dtype, bias=bv)
    assert_rows_close(out, reference(a, b, sa, sb, bv), dtype)


def test_zero_sizes_and_empty_k(ik, device):
    a, b = rand_fp8((0, 64), device), rand_fp8((8, 64), device)
    sa, sb = scales(8, device, False)
    assert ik.skinny_gemm_fp8(a, b, sa, sb).shape == (0, 8)
    a, b = rand_fp8((3, 64), device), rand_fp8((0, 64), device)
    assert ik.skinny_gemm_fp8(a, b, sa, sb).shape == (3, 0)
    # K = 0: the sums are empty, the output is the bias.
    a, b = rand_fp8((3, 0), device), rand_fp8((8, 0), device)
    bias = torch.randn(8, device=device).bfloat16()
    out = ik.skinny_gemm_fp8(a, b, sa, sb, bias=bias, out=poisoned(3, 8, torch.bfloat16, device))
    assert torch.equal(out, bias.expand(3, 8))


def test_strided_and_misaligned(ik, device):
    """Row slices of wider tensors (row stride > K), views starting one byte in (the byte
    path on CUDA) and an out with a row stride; each against the reference."""
    m, n, k = 9, 77, 1024
    a_wide, b_wide = rand_fp8((m, k + 48), device), rand_fp8((n, k + 16), device)
    out_wide = poisoned(m, n + 5, torch.bfloat16, device)
    sa, sb = scales(n, device, True)
    for a, b in ((a_wide[:, :k], b_wide[:, :k]), (a_wide[:, 1:k + 1], b_wide[:, :k]),
                 (a_wide[:, :k], b_wide[:, 3:k + 3])):
        out = out_wide[:, 2:n + 2]
        out.fill_(float("nan"))
        ik.skinny_gemm_fp8(a, b, sa, sb, out=out)
        assert_rows_close(out, reference(a, b, sa, sb), torch.bfloat16)
        assert torch.isnan(out_wide[:, :2]).all() and torch.isnan(out_wide[:, n + 2:]).all(), \
            "wrote outside out's columns"


def test_inputs_not_written_and_deterministic(ik, device):
    a, b = rand_fp8((16, 8192), device), rand_fp8((1000, 8192), device)
    sa, sb = scales(1000, device, True)
    before = [t.clone() for t in (a, b, sa, sb)]
    y1 = ik.skinny_gemm_fp8(a, b, sa, sb)
    y2 = ik.skinny_gemm_fp8(a, b, sa, sb)
    assert torch.equal(y1, y2), "two runs differ (the split-K sums must be in a fixed order)"
    for t, t0 in zip((a, b, sa, sb), before):
        assert torch.equal(t.view(torch.uint8) if t.dtype == FP8 else t,
                           t0.view(torch.uint8) if t0.dtype == FP8 else t0)


def test_op_takes_any_m(ik, device):
    """The op itself (no _scaled_mm route) at M > 32: on CUDA, slices of 32 rows."""
    a, b = rand_fp8((70, 256), device), rand_fp8((48, 256), device)
    sa, sb = scales(48, device, False)
    out = poisoned(70, 48, torch.float16, device)
    ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, None)
    assert_rows_close(out, reference(a, b, sa, sb), torch.float16)


# ---- fp8_linear.

@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fp8_linear(ik, device, static, dtype):
    n, k = 200, 512
    x = torch.randn(2, 3, k, device=device, dtype=dtype)
    w = torch.randn(n, k, device=device) * 0.05
    w_scale = (w.abs().amax(dim=1) / 448).float()  # per output channel
    w8 = (w / w_scale[:, None]).clamp(-448, 448).to(FP8)
    bias = torch.randn(n, device=device)
    out_dtype = dtype if dtype != torch.float32 else torch.bfloat16
    s = (x.abs().amax().float() / 448).reshape(1)
    if static:
        s = s * 1.5  # a calibrated scale, not the tensor's own
    y = ik.fp8_linear(x, w8, w_scale, input_scale=s if static else None, bias=bias.to(out_dtype))
    assert y.shape == (2, 3, n) and y.dtype == out_dtype
    xq = (x.float().reshape(-1, k) * (1.0 / s)).clamp(-448, 448).to(FP8)
    ref = reference(xq, w8, s, w_scale, bias.to(out_dtype))
    assert_rows_close(y.reshape(-1, n), ref, out_dtype)
    # And close to the unquantised product (fp8's own error, a few percent).
    exact = x.double().reshape(-1, k) @ w.double().T + bias.to(out_dtype).double()
    err = ((y.reshape(-1, n).double().cpu() - exact.cpu()).norm() / exact.norm().cpu()).item()
    assert err < 0.08, err


def test_fp8_linear_zero_rows(ik, device):
    """No tokens: the dynamic scale has nothing to reduce, the output has no rows."""
    w8 = rand_fp8((24, 256), device)
    ws = torch.ones(1, device=device)
    for scale in (None, torch.ones(1, device=device)):
        y = ik.fp8_linear(torch.randn(0, 256, device=device, dtype=torch.bfloat16), w8, ws, scale)
        assert y.shape == (0, 24) and y.dtype == torch.bfloat16


def test_out_dtype_follows_out(ik, device):
    """Without out_dtype, a given out's dtype is the output's; given both, they must agree."""
    a, b = rand_fp8((3, 64), device), rand_fp8((8, 64), device)
    sa, sb = scales(8, device, False)
    out = poisoned(3, 8, torch.float16, device)
    assert ik.skinny_gemm_fp8(a, b, sa, sb, out=out) is out
    assert_rows_close(out, reference(a, b, sa, sb), torch.float16)
    with pytest.raises(ValueError, match=r"out has dtype torch.float16 but out_dtype is torch.bfloat16"):
        ik.skinny_gemm_fp8(a, b, sa, sb, out_dtype=torch.bfloat16, out=out)


# ---- CUDA only: the _scaled_mm route, graphs, the work-split knobs.

def cuda_only(device):
    if device != "cuda":
        pytest.skip("CUDA only")


@pytest.mark.parametrize("m", [33, 64, 200])
def test_large_m_goes_to_scaled_mm(ik, device, m):
    cuda_only(device)
    n, k = 512, 1024
    a, b = rand_fp8((m, k), device), rand_fp8((n, k), device)
    sa, sb = scales(n, device, False)
    bias = torch.randn(n, device=device).bfloat16()
    y = ik.skinny_gemm_fp8(a, b, sa, sb, bias=bias)
    expect = torch._scaled_mm(a, b.t(), scale_a=sa.reshape(()), scale_b=sb.reshape(()), bias=bias,
                              out_dtype=torch.bfloat16)
    assert torch.equal(y, expect), "M > 32 did not go through torch._scaled_mm"
    # A given out takes the same route; one the kernel would refuse is refused here too.
    out = poisoned(m, n, torch.bfloat16, device)
    assert ik.skinny_gemm_fp8(a, b, sa, sb, bias=bias, out=out) is out and torch.equal(out, expect)
    for bad in (poisoned(m, n, torch.float32, device), poisoned(m, n + 1, torch.bfloat16, device),
                torch.empty(m, n, dtype=torch.bfloat16)):
        with pytest.raises(ValueError, match=rf"out must be \[{m}, {n}\] bfloat16 or float16 on cuda"):
            ik.skinny_gemm_fp8(a, b, sa, sb, bias=bias, out=bad)
    # Per channel: row-wise _scaled_mm (bf16) and the bias added after; fp16: our kernel.
    sa, sb = scales(n, device, True)
    for dtype in OUT_DTYPES:
        y = ik.skinny_gemm_fp8(a, b, sa, sb, out_dtype=dtype, bias=bias.to(dtype))
        assert_rows_close(y, reference(a, b, sa, sb, bias.to(dtype)), dtype)


@pytest.mark.parametrize("m", [1, 2, 8, 24])
@pytest.mark.parametrize("cfg", [[], [0, 0, 0, 3], [0, 0, 0, 7], [0, 0, 0, 8]])
def test_cuda_graph_replays_new_inputs(ik, device, m, cfg):
    """The default (M = 1: convert 7; else convert 6: its tensor maps are built at capture
    and name the same buffers at every replay), convert 3 (at M = 24 the f16 pre-pass,
    its workspace and the programmatic dependent launch of the GEMM), convert 7 (M <= 2)
    and convert 8 (M = 1: the activation copied to shared memory in every block) captured
    into a graph."""
    cuda_only(device)
    if cfg[3:] == [8] and (m != 1 or torch.cuda.get_device_capability()[0] != 9):
        pytest.skip("convert 8 takes one row of a, on Hopper")
    if cfg[3:] == [7] and m > 2:
        pytest.skip("convert 7 takes at most 2 rows of a")
    n, k = 2304 + 13, 4096
    a, b = rand_fp8((m, k), device), rand_fp8((n, k), device)
    sa, sb = scales(n, device, True)
    out = poisoned(m, n, torch.bfloat16, device)
    ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, None, cfg)  # warm-up (allocations, module load)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, None, cfg)
    for _ in range(2):
        a.copy_(rand_fp8((m, k), device))
        sa.copy_(scales(n, device, False)[0])
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_rows_close(out, reference(a, b, sa, sb), torch.bfloat16)


# [tiles_per_block, warps_per_tile, cluster, convert]: every split the benchmark sweeps.
CONFIGS = [[1, 1, 1, 1], [1, 8, 1, 1], [1, 4, 2, 2], [2, 4, 8, 1], [4, 2, 3, 2], [8, 1, 1, 2],
           [1, 3, 5, 1], [0, 0, 8, 0], [0, 0, 0, 2], [0, 0, 0, 1], [0, 0, 0, 3], [1, 1, 1, 3],
           [1, 8, 1, 3], [2, 4, 2, 3], [8, 1, 1, 3], [1, 1, 8, 3], [4, 2, 3, 3], [1, 3, 5, 3]]


@pytest.mark.parametrize("m", [1, 8, 9, 17, 24, 32, 40])
def test_every_work_split(ik, device, m):
    cuda_only(device)
    n, k = 1000, 64 * 37 + 16
    a, b = rand_fp8((m, k), device), rand_fp8((n, k), device)
    sa, sb = scales(n, device, True)
    bias = torch.randn(n, device=device).half()
    ref = reference(a, b, sa, sb, bias)
    for cfg in CONFIGS:
        out = poisoned(m, n, torch.float16, device)
        ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, bias, cfg)
        assert_rows_close(out, ref, torch.float16)


@pytest.mark.parametrize("m", [1, 5, 8, 9, 16, 17, 24, 25, 32])
@pytest.mark.parametrize("n,k", [(1000, 64 * 37 + 16), (37, 6656), (2304, 1024), (333, 64 * 41 + 48),
                                 (64, 16), (130, 64 * 9)])
def test_wgmma_path(ik, device, m, n, k):
    """convert 4 (Hopper's fp8 warpgroup MMA, M <= 32: n = 16, 32, 48, 64) at every K
    split it takes, the launcher's included, with one and (M <= 16) two groups of chunks
    in flight, and convert 5 (the same MMAs, persistent, through a ring of 3 or 4 slots): odd N (rows clamped, not stored), K tails (a partial 64-byte
    chunk, K = 16), K ranges shorter than a group of 8 chunks, per-channel scales, bias,
    both out dtypes, strided rows of a and b."""
    cuda_only(device)
    a, b, sa, sb = strided_operands(m, n, k, device)
    for dt in (torch.bfloat16, torch.float16):
        bias = torch.randn(n, device=device).to(dt)
        ref = reference(a, b, sa, sb, bias)
        for cfg in ([0, 0, 0, 4], [0, 0, 1, 4], [0, 0, 3, 4], [0, 0, 8, 4], [1, 0, 0, 4], [1, 0, 5, 4],
                    [2, 0, 2, 4], [0, 2, 0, 4], [0, 2, 1, 4], [1, 2, 3, 4], [2, 1, 8, 4], [2, 2, 8, 4],
                    [0, 0, 0, 5], [0, 3, 0, 5], [0, 4, 8, 5], [0, 3, 3, 5]):
            if cfg[1] == 2 and m > 16:
                continue  # two groups in flight: M <= 16 only (test_rejects_bad_config)
            out = poisoned(m, n, dt, device)
            ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, bias, cfg)
            assert_rows_close(out, ref, dt)


@pytest.mark.parametrize("m,n,k", [(m, n, k) for m in (1, 8, 16) for n, k in ((4500, 4096), (2100, 8256))] +
                         [(m, n, k) for m in (17, 24, 32) for n, k in ((600, 4096 + 64 * 3 + 16), (1024, 8192),
                                                                      (4500, 4096))] + [(24, 2100, 8256)] +
                         [(m, 7168, 8192) for m in (1, 2, 8)])
def test_wgmma_default_choices(ik, device, m, n, k):
    """The launcher's own choices where convert 4 ran by default before convert 6 (which
    takes these operands now, N >= 1024; 600 x 4288 still takes convert 4): past 16 MiB of weight at
    M <= 16 (two groups of chunks in flight at K <= 8192 or M 9-16, one at M 2-8 with K >
    8192), up to 16 MiB at M 17-32 (n = 48 or 64; a K tail and N not a multiple of the
    block's 64 rows), past it up to 36 MiB at M 17-24, or at M 25-32 with K <= 8192, and
    up to 64 MiB at M <= 8 with K <= 8192 and N <= K (one group)."""
    cuda_only(device)
    a = rand_fp8((m, k), device)
    b = rand_fp8((n, k), device)
    sa, sb = scales(n, device, True)
    bias = torch.randn(n, device=device).bfloat16()
    ref = reference(a, b, sa, sb, bias)
    out = poisoned(m, n, torch.bfloat16, device)
    ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, bias, [])
    assert_rows_close(out, ref, torch.bfloat16)


@pytest.mark.parametrize("m", [1, 8, 16, 17, 32])
@pytest.mark.parametrize("n,k", [(2100, 2048 + 64 * 3 + 16), (2304, 8256), (6144, 8192 + 64), (16448, 4160)])
@pytest.mark.parametrize("ring", ["1", "0"])
def test_wgmma_ring_default_choices(ik, device, monkeypatch, m, n, k, ring):
    """The launcher's own choices where IK_SKINNY_GEMM_RING=1 (read at each launch) lets
    convert 5 run (N >= 2048: up to 16 MiB of weight at every M, and at M 17-32 with K >=
    8192 or past 64 MiB, 16448 x 4160), persistent where the tiles outnumber the resident
    clusters (6144 x 8256 at M 32), and the same operands with it off (the default: convert 6)."""
    cuda_only(device)
    monkeypatch.setenv("IK_SKINNY_GEMM_RING", ring)
    a = rand_fp8((m, k), device)
    b = rand_fp8((n, k), device)
    sa, sb = scales(n, device, True)
    bias = torch.randn(n, device=device).bfloat16()
    out = poisoned(m, n, torch.bfloat16, device)
    ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, bias, [])
    assert_rows_close(out, reference(a, b, sa, sb, bias), torch.bfloat16)


def assert_configs_agree(ik, device, m, n, k, configs):
    """The GEMM of fresh fp8 operands (per-channel scales, bf16 bias and out) under each
    `config`: bitwise equal outputs, and the first right against fp64."""
    a, b = rand_fp8((m, k), device), rand_fp8((n, k), device)
    sa, sb = scales(n, device, True)
    bias = torch.randn(n, device=device).bfloat16()
    outs = []
    for cfg in configs:
        out = poisoned(m, n, torch.bfloat16, device)
        ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, bias, cfg)
        outs.append(out)
    assert all(torch.equal(outs[0], o) for o in outs[1:]), "the configs' outputs differ"
    assert_rows_close(outs[0], reference(a, b, sa, sb, bias), torch.bfloat16)


@pytest.mark.parametrize("m", [1, 9, 17, 32])
@pytest.mark.parametrize("nc", [1, 3, 8])
def test_wgmma_ring_persistent(ik, device, m, nc):
    """convert 5 runs convert 4's MMAs in the same order (one group of 8 chunks in flight,
    two warpgroups a block), so for one K split the outputs are bitwise equal, also where
    a cluster takes several tiles in turn (19237 rows: 301 tiles against at most 132
    resident clusters) with the partials of successive tiles in alternating buffers, and
    where the last block's share of K is short (zeros in its ring). Against fp64 too."""
    cuda_only(device)
    assert_configs_agree(ik, device, m, 64 * 300 + 37, 64 * 37 + 16,
                         ([2, 1, nc, 4], [0, 3, nc, 5], [0, 4, nc, 5]))


@pytest.mark.parametrize("m", [1, 5, 8, 9, 16, 17, 24, 25, 32])
@pytest.mark.parametrize("n,k", [(1000, 64 * 37 + 16), (37, 6656), (2304 + 13, 1040), (130, 16), (129, 128 * 9),
                                 (300, 16384)])
def test_tma_path(ik, device, m, n, k):
    """convert 6 (the weight and the activation copied by the tensor memory accelerator into
    a ring of 4 stages, MMAs on both from shared memory, n = 8, 16, 24 or 32) at the
    launcher's K split and at 1, 3 and 8, with one consumer warpgroup (64 rows a block, the
    default) and two (128): odd N (a last block mostly past N,
    zeros from the copies), K tails (K % 128 != 0, K = 16: one box, seven blocks of a
    cluster of 8 with no K), long K (32 stages a block), strided rows of a and b,
    per-channel scales, bias, both out dtypes. The epilogues (warps_per_tile 1: the
    partials by element, 2: by weight row, 3: direct, without a K split, 4: pushed rank to
    rank, a chain of up to 7 hops at a cluster of 8; 5: swapped between two ranks at a split
    of 2, else pushed) add the ranks' sums in the same order, so their outputs are bitwise
    equal."""
    cuda_only(device)
    a, b, sa, sb = strided_operands(m, n, k, device)
    for dt in (torch.bfloat16, torch.float16):
        bias = torch.randn(n, device=device).to(dt)
        ref = reference(a, b, sa, sb, bias)
        for rb, nc in ((0, 0), (0, 1), (0, 3), (1, 8), (2, 0), (2, 1), (2, 3), (2, 8)):
            outs = []
            for kw in (0, 1, 2, 4, 5) + ((3,) if nc <= 1 else ()):
                out = poisoned(m, n, dt, device)
                ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, bias, [rb, kw, nc, 6])
                assert_rows_close(out, ref, dt)
                outs.append(out)
            assert all(torch.equal(outs[0], o) for o in outs[1:])


@pytest.mark.parametrize("f32", ["0", "1"])
@pytest.mark.parametrize("n,k", [(1000, 64 * 37 + 16), (37, 6656), (2304 + 13, 1040), (130, 16), (77, 8192 + 64),
                                 (129, 4096 * 3 + 48), (301, 16384), (2311, 16384), (5, 20480)])
@pytest.mark.parametrize("m", [1, 2])
def test_rows_path(ik, device, monkeypatch, m, n, k, f32):
    """convert 7 (M <= 2: whole weight rows a block, no K split between blocks) at 1, 2 and 4
    rows a block and 1, 2 and 4 segments a thread in flight: odd N (the last block's rows
    past N clamped, not stored), K tails (K % 4096 != 0: segments past K load zeros; K = 16:
    one thread of 256 has work; K = 8256: the automatic 4 segments a thread), several steps
    of K, strided rows of a and b, per-channel scales, bias, both out dtypes; products
    summed 16 at a time in f16 (the default) or all in fp32 (IK_SKINNY_GEMM_ROWS_F32=1).
    Automatic rows and segments (0, 0) with f16 sums at K 8256-16384 run the persistent
    blocks, two an SM (2311 rows: several rows a block, both stages and shared arrays). A
    row's sums run in the same order whatever the rows a block or the kernel, so those
    outputs are bitwise equal. At M = 2 (the second row of a kept in shared memory in the
    persistent blocks) each output row is bitwise the output of its row of a alone."""
    cuda_only(device)
    monkeypatch.setenv("IK_SKINNY_GEMM_ROWS_F32", f32)
    a, b, sa, sb = strided_operands(m, n, k, device)
    for dt in (torch.bfloat16, torch.float16):
        bias = torch.randn(n, device=device).to(dt)
        ref = reference(a, b, sa, sb, bias)
        for kw in (0, 1, 2, 4):
            outs = []
            for rb in (0, 1, 2, 4):
                out = poisoned(m, n, dt, device)
                ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, bias, [rb, kw, 0, 7])
                assert_rows_close(out, ref, dt)
                outs.append(out)
            assert all(torch.equal(outs[0], o) for o in outs[1:])
            for r in range(m) if m > 1 and kw == 0 else ():
                one = poisoned(1, n, dt, device)
                ik.ops.skinny_gemm_fp8(one, a[r:r + 1], b, sa, sb, bias, [0, 0, 0, 7])
                assert torch.equal(one[0], outs[0][r]), f"row {r} of a alone differs"


@pytest.mark.parametrize("n,k", [(1000, 64 * 37 + 16), (37, 6656), (2304 + 13, 1040), (130, 16), (77, 8192 + 64),
                                 (129, 4096 * 3 + 48), (301, 16384), (5, 20480), (9, 131072)])
def test_rows_wgmma_path(ik, device, n, k):
    """convert 8 (M = 1, sm_90a: whole weight rows a block, the 64 logical rows of the MMA
    its rows cut into K slices, the activation's slices in B's columns) at 1, 2, 4 and 8
    rows a block and 1 and 2 groups of steps in flight: odd N (the last block's rows past N
    clamped, not stored), K tails (segments past K read the row's last 16 bytes against
    zero activations; K = 16: one lane of 32 has work), padding steps, K at its limit (128
    KB of shared memory), strided rows of a and b, per-channel scales, bias, both out
    dtypes. A row's sums run in the same order at 1 and 2 groups in flight, so those are
    bitwise equal."""
    cuda_only(device)
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("convert 8 runs Hopper's warpgroup MMA")
    a, b, sa, sb = strided_operands(1, n, k, device)
    for dt in (torch.bfloat16, torch.float16):
        bias = torch.randn(n, device=device).to(dt)
        ref = reference(a, b, sa, sb, bias)
        for rb in (0, 1, 2, 4, 8):
            outs = []
            for g in (0, 1, 2):
                out = poisoned(1, n, dt, device)
                ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, bias, [rb, g, 0, 8])
                assert_rows_close(out, ref, dt)
                outs.append(out)
            assert all(torch.equal(outs[0], o) for o in outs[1:])


@pytest.mark.parametrize("m", [1, 13, 32])
def test_tma_direct_persistent(ik, device, m):
    """convert 6's direct epilogue in persistent blocks, where blocks take several tiles
    (19237 rows: 301 tiles of 64 against 264 resident blocks on an H200; 151 of 128 with two
    consumers a block), bitwise the by-element epilogue's (and the default's), and right."""
    cuda_only(device)
    assert_configs_agree(ik, device, m, 64 * 300 + 37, 64 * 5 + 16, ([0, 1, 1, 6], [], [0, 3, 0, 6], [2, 3, 1, 6]))


@pytest.mark.parametrize("m,n,k", [(2, 1024, 6656), (8, 2304, 16384), (16, 6144, 4096), (17, 4096 + 77, 4096),
                                   (24, 4096, 4096), (32, 1024, 8192), (32, 6144, 1040), (32, 16448, 4160),
                                   (16, 7168, 8192), (17, 7168, 8192)])
def test_tma_is_the_default(ik, device, m, n, k):
    """At M <= 32 and N >= 1024 (M = 1: past convert 7's rule) the launcher runs convert 6 with its own K split (one
    consumer warpgroup a block, the split at most 4; from 32 MiB of weight, here 2304 x
    16384 and 16448 x 4160, tensor maps without L2 promotion; without a K split, e.g.
    6144 x 4096 and 7168 x 8192 at M 17, the direct epilogue; at a split of 2, e.g. 4096 x
    4096, 4173 x 4096 and 7168 x 8192 at M 16 (fewer tiles than SMs, K of 8192), the
    sums swapped between the two ranks; at M <= 8 at a split of 4, e.g. 2304 x 16384, the
    sums pushed rank to rank; at M = 32 at a split of 4, 1024 x 8192, the partials by
    element): the default's output is
    bitwise the explicit convert 6's (one split order), and right."""
    cuda_only(device)
    a, b = rand_fp8((m, k), device), rand_fp8((n, k), device)
    sa, sb = scales(n, device, True)
    bias = torch.randn(n, device=device).bfloat16()
    outs = []
    split = TMA_SPLIT.get((m, n, k))
    for cfg in ([], [0, 0, 0, 6]) + (([0, 0, split, 6],) if split else ()):
        out = poisoned(m, n, torch.bfloat16, device)
        ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, bias, cfg)
        outs.append(out)
    assert torch.equal(outs[0], outs[1]), "the default is not convert 6 here"
    if split:  # another split sums in another order: bitwise equal only at the same split
        assert torch.equal(outs[0], outs[2]), f"the default's K split is not {split} here"
    assert_rows_close(outs[0], reference(a, b, sa, sb, bias), torch.bfloat16)


@pytest.mark.parametrize("n,k,cfg", [(1024, 8192, [0, 0, 0, 7]), (2304, 16384, [0, 0, 0, 7]), (4304, 4096, [0, 0, 0, 7]),
                                     (4096 + 77, 4096, [8, 0, 0, 8]), (4096, 14336, [0, 0, 0, 7]),
                                     (6144, 8192, [8, 0, 0, 8]), (8192, 4096, [4, 0, 0, 8]), (8192, 3584, [4, 0, 0, 8]),
                                     (16384 + 33, 4096, [4, 0, 0, 8]), (1024, 4096 - 16, [0, 0, 0, 6]),
                                     (16384, 2048, [0, 0, 0, 6])])
def test_rows_is_the_default_at_m1(ik, device, n, k, cfg):
    """At M = 1 (bitwise the explicit config's output): convert 7's persistent blocks where
    K is past 8 KB up to 16 KB and the weight up to 64 MiB (2304 x 16384, 4096 x 14336);
    else convert 8 with blocks of 8 rows where they fill an H200 in one wave (at most 7 an
    SM: 924), at least 3.5 an SM and the SMs within a tenth of each other (4173 rows: 522
    blocks, 4 on the busiest SM; 6144 x 8192: 768), with blocks of 4 rows where 8 would
    take more than one wave (K >= 3584); else convert 7 for N >= 1024, K >= 4096 and up to
    40 MiB of weight (4304 x 4096: 538 blocks, 5 on the busiest SM against 4.1 on
    average); convert 6 past any of those."""
    cuda_only(device)
    if cfg[3] == 8 and (torch.cuda.get_device_capability()[0] != 9
                        or torch.cuda.get_device_properties(0).multi_processor_count != 132):
        pytest.skip("the rule's blocks are counted for an H100/H200 (132 SMs)")
    a, b = rand_fp8((1, k), device), rand_fp8((n, k), device)
    sa, sb = scales(n, device, True)
    bias = torch.randn(n, device=device).bfloat16()
    outs = []
    for c in ([], cfg):
        out = poisoned(1, n, torch.bfloat16, device)
        ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, bias, c)
        outs.append(out)
    assert torch.equal(outs[0], outs[1]), f"the default is not {cfg} here"
    assert_rows_close(outs[0], reference(a, b, sa, sb, bias), torch.bfloat16)


@pytest.mark.parametrize("n,k", [(2304, 16384), (4096 + 77, 14336), (1024, 8192 + 16), (1280, 8192), (7168, 8192)])
def test_rows_is_the_default_at_m2(ik, device, n, k):
    """At M = 2, convert 7 where K is 8-16 KB, N >= 1024, up to 64 MiB of weight (the
    persistent blocks past 8 KB, the one-shot blocks at 8 KB: 1280 and 7168 x 8192): the
    default is bitwise the explicit convert 7, and right."""
    cuda_only(device)
    a, b = rand_fp8((2, k), device), rand_fp8((n, k), device)
    sa, sb = scales(n, device, True)
    bias = torch.randn(n, device=device).bfloat16()
    outs = []
    for c in ([], [0, 0, 0, 7]):
        out = poisoned(2, n, torch.bfloat16, device)
        ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, bias, c)
        outs.append(out)
    assert torch.equal(outs[0], outs[1]), "the default is not convert 7 here"
    assert_rows_close(outs[0], reference(a, b, sa, sb, bias), torch.bfloat16)


# The launcher's K split at some of test_tma_is_the_default's points.
TMA_SPLIT = {(8, 2304, 16384): 4, (16, 6144, 4096): 1, (24, 4096, 4096): 2, (16, 7168, 8192): 2,
             (17, 7168, 8192): 1}


@pytest.mark.parametrize("m", [1, 32])
def test_tma_deterministic_and_nan_in_its_row(ik, device, m):
    """convert 6 sums a row's K split in rank order: two runs are bitwise equal. A NaN
    weight (in K's last partial box, in a whole box, in the last row of a block of 128)
    reaches its own output column only; the zeros the copies put past K and past N do not
    spread it."""
    cuda_only(device)
    n, k = 300, 128 * 5 + 48
    a, b = rand_fp8((m, k), device), rand_fp8((n, k), device)
    one = torch.ones(1, device=device)
    outs = []
    for _ in range(2):
        out = poisoned(m, n, torch.bfloat16, device)
        ik.ops.skinny_gemm_fp8(out, a, b, one, one, None, [0, 0, 3, 6])
        outs.append(out)
    assert torch.equal(outs[0], outs[1]), "two runs differ (the split-K sums must be in a fixed order)"
    b[5, k - 3] = float("nan")
    b[6, 200] = float("nan")
    b[127, k - 16] = float("nan")
    bad = torch.zeros(n, dtype=torch.bool, device=device)
    bad[[5, 6, 127]] = True
    for nc in (1, 3):
        out = poisoned(m, n, torch.bfloat16, device)
        ik.ops.skinny_gemm_fp8(out, a, b, one, one, None, [0, 0, nc, 6])
        assert torch.isnan(out[:, bad]).all() and not torch.isnan(out[:, ~bad]).any(), nc


@pytest.mark.parametrize("nc", [1, 2, 8])
@pytest.mark.parametrize("rb", [1, 2])
@pytest.mark.parametrize("groups", [1, 2])
def test_wgmma_nan_stays_in_its_row(ik, device, nc, rb, groups):
    """convert 4 and 5 read a row's last 16 bytes again where K's partial chunk ends (against
    zero activations): a NaN weight there, or anywhere in a row, reaches that row only."""
    cuda_only(device)
    k, n = 64 * 3 + 16, 70
    a, b = rand_fp8((3, k), device), rand_fp8((n, k), device)
    b[5, k - 3] = float("nan")  # the partial chunk
    b[6, 70] = float("nan")     # a whole chunk
    b[63, k - 16] = float("nan")  # the last row of a tile (of 32 or 64 rows)
    one = torch.ones(1, device=device)
    bad = torch.zeros(n, dtype=torch.bool, device=device)
    bad[[5, 6, 63]] = True
    for cfg in ([rb, groups, nc, 4], [0, 2 + rb, nc, 5]):
        out = poisoned(3, n, torch.bfloat16, device)
        ik.ops.skinny_gemm_fp8(out, a, b, one, one, None, cfg)
        assert torch.isnan(out[:, bad]).all() and not torch.isnan(out[:, ~bad]).any(), cfg


@pytest.mark.parametrize("m", [1, 5, 9, 16, 23, 32])
@pytest.mark.parametrize("k", [64 * 41, 64 * 41 + 48, 16])
def test_f16_copy_matches_per_warp_conversion(ik, device, m, k):
    """convert 3 (the f16 copy of a and the cp.async weight ring) runs the same MMAs in the
    same order as convert 1 (the activation converted in every warp), from the same exact
    f16 values: for one work split the outputs are bitwise equal, K tails included."""
    cuda_only(device)
    n = 333
    a, b = rand_fp8((m, k), device), rand_fp8((n, k), device)
    sa, sb = scales(n, device, True)
    for split in ([1, 4, 2], [2, 4, 1], [1, 1, 1], [8, 1, 3]):
        outs = []
        for cvt in (1, 3):
            out = poisoned(m, n, torch.bfloat16, device)
            ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, None, split + [cvt])
            outs.append(out)
        assert torch.equal(outs[0], outs[1]), f"convert 1 and 3 differ for split {split}"
    assert_rows_close(outs[1], reference(a, b, sa, sb), torch.bfloat16)


def test_fp8_nan_and_extremes(ik, device):
    """Saturated weights and activations (+-448) and subnormals: exact products in fp32.
    A NaN weight propagates; an activation NaN propagates on the CPU and, on CUDA, with
    convert=1, 3, 4, 6 and 7 (convert=2 reads it as 480: documented)."""
    k = 256
    a = torch.full((2, k), 448.0, device=device).to(FP8)
    a[1] = torch.tensor(2.0 ** -9, device=device).to(FP8)  # the smallest subnormal
    b = torch.full((16, k), -448.0, device=device).to(FP8)
    one = torch.ones(1, device=device)
    y = ik.skinny_gemm_fp8(a, b, one / 4096, one, out=poisoned(2, 16, torch.bfloat16, device))
    # Every product and partial sum here is exact in fp32, and the results fit bf16.
    assert torch.equal(y.cpu(), reference(a, b, one / 4096, one).cpu().to(torch.bfloat16))
    b_nan = b.clone()
    b_nan[3, 7] = float("nan")
    y = ik.skinny_gemm_fp8(a, b_nan, one, one)
    assert torch.isnan(y[:, 3]).all() and not torch.isnan(y[:, :3]).any()
    a_nan = a.clone()
    a_nan[0, 5] = float("nan")
    if device == "cuda":
        out = poisoned(2, 16, torch.bfloat16, device)
        ik.ops.skinny_gemm_fp8(out, a_nan, b, one, one, None, [0, 0, 0, 1])
        if torch.cuda.get_device_capability()[0] == 9:  # convert 8 (M = 1): exact here, NaN propagates
            for rb in (1, 2, 4, 8):
                for i in (0, 1):
                    out8 = poisoned(1, 16, torch.bfloat16, device)
                    ik.ops.skinny_gemm_fp8(out8, a[i:i + 1], b, one / 4096, one, None, [rb, 0, 0, 8])
                    assert torch.equal(out8.cpu(), reference(a[i:i + 1], b, one / 4096, one).cpu().to(torch.bfloat16))
                ik.ops.skinny_gemm_fp8(out8, a_nan[:1], b, one, one, None, [rb, 0, 0, 8])
                assert torch.isnan(out8).all()
                ik.ops.skinny_gemm_fp8(out8, a[1:], b_nan, one, one, None, [rb, 0, 0, 8])
                assert torch.isnan(out8[0, 3]) and not torch.isnan(out8[0, :3]).any()
        for cvt in (3, 4, 6):
            out3 = poisoned(2, 16, torch.bfloat16, device)
            ik.ops.skinny_gemm_fp8(out3, a_nan, b, one, one, None, [0, 0, 0, cvt])
            assert torch.isnan(out3[0]).all() and not torch.isnan(out3[1]).any(), f"convert {cvt}"
        for f32 in ("0", "1"):  # convert 7 (M = 1), f16 partial sums and fp32: exact here too
            os.environ["IK_SKINNY_GEMM_ROWS_F32"] = f32
            try:
                for i in (0, 1):
                    out7 = poisoned(1, 16, torch.bfloat16, device)
                    ik.ops.skinny_gemm_fp8(out7, a[i:i + 1], b, one / 4096, one, None, [0, 0, 0, 7])
                    assert torch.equal(out7.cpu(), reference(a[i:i + 1], b, one / 4096, one).cpu().to(torch.bfloat16))
                ik.ops.skinny_gemm_fp8(out7, a_nan[:1], b_nan, one, one, None, [0, 0, 0, 7])
                assert torch.isnan(out7).all()
                ik.ops.skinny_gemm_fp8(out7, a[1:], b_nan, one, one, None, [0, 0, 0, 7])
                assert torch.isnan(out7[0, 3]) and not torch.isnan(out7[0, :3]).any()
            finally:
                del os.environ["IK_SKINNY_GEMM_ROWS_F32"]
    else:
        out = ik.skinny_gemm_fp8(a_nan, b, one, one)
    assert torch.isnan(out[0]).all() and not torch.isnan(out[1]).any()
    # M > 8 (two n-tiles; convert 1 by default at this N): an activation NaN still
    # propagates.
    a12 = a.repeat(6, 1)
    a12[7, 9] = float("nan")
    y = ik.skinny_gemm_fp8(a12, b, one, one)
    assert torch.isnan(y[7]).all() and not torch.isnan(y[torch.arange(12, device=device) != 7]).any()


# ---- the op as torch sees it.

def test_opcheck(ik, device):
    a, b = rand_fp8((5, 96), device), rand_fp8((40, 96), device)
    sa, sb = scales(40, device, True)
    bias = torch.randn(40, device=device).bfloat16()
    out = torch.empty(5, 40, device=device, dtype=torch.bfloat16)
    # test_schema compares fp8 tensors with torch.allclose, which torch does not implement
    # for float8; inputs are checked unchanged by test_inputs_not_written_and_deterministic.
    torch.library.opcheck(ik.ops.skinny_gemm_fp8, (out, a, b, sa, sb, bias),
                          test_utils=("test_autograd_registration", "test_faketensor",
                                      "test_aot_dispatch_dynamic"))


def test_torch_compile_fullgraph(ik, device):
    torch._dynamo.reset()
    n, k = 300, 512
    w = rand_fp8((n, k), device)
    ws = (torch.rand(n, device=device) + 0.5) / 64
    x = torch.randn(4, k, device=device, dtype=torch.bfloat16)
    f = lambda x: ik.fp8_linear(x, w, ws)  # noqa: E731
    eager = f(x)
    compiled = torch.compile(f, fullgraph=True)(x)
    torch.testing.assert_close(compiled, eager, rtol=2e-2, atol=2e-2)


# ---- errors: every bad input is refused with a message naming what was expected.

def test_rejects_bad_dtypes(ik, device):
    a, b = rand_fp8((4, 64), device), rand_fp8((8, 64), device)
    sa, sb = scales(8, device, False)
    with pytest.raises(RuntimeError, match="a must be float8_e4m3fn, got Half"):
        ik.skinny_gemm_fp8(a.half(), b, sa, sb)
    with pytest.raises(RuntimeError, match="b must be float8_e4m3fn, got Float8_e5m2"):
        ik.skinny_gemm_fp8(a, b.float().to(torch.float8_e5m2), sa, sb)
    with pytest.raises(RuntimeError, match="out must be bfloat16 or float16, got Float"):
        ik.skinny_gemm_fp8(a, b, sa, sb, out_dtype=torch.float32)
    with pytest.raises(RuntimeError, match="scale_a must be float32, got Half"):
        ik.skinny_gemm_fp8(a, b, sa.half(), sb)
    with pytest.raises(RuntimeError, match="scale_b must be float32, got Double"):
        ik.skinny_gemm_fp8(a, b, sa, sb.double())
    with pytest.raises(RuntimeError, match=r"bias must have out's dtype \(BFloat16\), got Half"):
        ik.skinny_gemm_fp8(a, b, sa, sb, bias=torch.zeros(8, device=device).half())


def test_rejects_bad_shapes(ik, device):
    a, b = rand_fp8((4, 64), device), rand_fp8((8, 64), device)
    sa, sb = scales(8, device, False)
    with pytest.raises(RuntimeError, match=r"b must have shape \[N, K\] with K = 64 \(a's columns\), got \[8, 48\]"):
        ik.skinny_gemm_fp8(a, b[:, :48], sa, sb)
    with pytest.raises(RuntimeError, match=r"a must be 2-D \[M, K\], got shape \[2, 2, 64\]"):
        ik.skinny_gemm_fp8(a.reshape(2, 2, 64), b, sa, sb)
    with pytest.raises(RuntimeError, match=r"b must be 2-D \[N, K\], got shape \[512\]"):
        ik.skinny_gemm_fp8(a, b.reshape(-1), sa, sb)
    with pytest.raises(RuntimeError, match=r"out must have shape \[4, 8\] \(\[M, N\]\), got \[8, 4\]"):
        ik.skinny_gemm_fp8(a, b, sa, sb, out=torch.empty(8, 4, device=device, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match=r"scale_a must have 1 element, got shape \[2\]"):
        ik.skinny_gemm_fp8(a, b, torch.ones(2, device=device), sb)
    with pytest.raises(RuntimeError, match=r"scale_b must have 1 element \(per tensor\) or N = 8 \(per output channel\), got shape \[7\]"):
        ik.skinny_gemm_fp8(a, b, sa, torch.ones(7, device=device))
    with pytest.raises(RuntimeError, match=r"bias must have shape \[8\], got \[4, 2\]"):
        ik.skinny_gemm_fp8(a, b, sa, sb, bias=torch.zeros(4, 2, device=device).bfloat16())


def test_rejects_bad_layouts(ik, device):
    a = rand_fp8((4, 64), device)
    sa, sb = scales(8, device, False)
    b_t = rand_fp8((64, 8), device).t()  # [8, 64] with K strided: a transposed weight
    with pytest.raises(RuntimeError, match=r"b must be contiguous along its last dimension \[N, K\], "
                                           r"got strides \[1, 8\] \(nn.Linear's weight layout; a "
                                           r"transposed weight needs .t\(\).contiguous\(\)\)"):
        ik.skinny_gemm_fp8(a, b_t, sa, sb)
    b = rand_fp8((8, 64), device)
    with pytest.raises(RuntimeError, match=r"a must be contiguous along its last dimension \[M, K\]"):
        ik.skinny_gemm_fp8(rand_fp8((64, 4), device).t(), b, sa, sb)
    with pytest.raises(RuntimeError, match=r"a rows overlap \(row stride 0 < row length 64\)"):
        ik.skinny_gemm_fp8(a[:1].expand(4, 64), b, sa, sb)
    with pytest.raises(RuntimeError, match="scale_b must be contiguous"):
        ik.skinny_gemm_fp8(a, b, sa, torch.ones(16, device=device)[::2])
    with pytest.raises(RuntimeError, match="bias must be contiguous, got stride 2"):
        ik.skinny_gemm_fp8(a, b, sa, sb, bias=torch.zeros(16, device=device).bfloat16()[::2])
    out = torch.empty(4, 8, device=device, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="out must not overlap bias"):
        ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, out[0])


def test_rejects_wrong_device(ik, device):
    cuda_only(device)
    a, b = rand_fp8((4, 64), device), rand_fp8((8, 64), device)
    sa, sb = scales(8, device, False)
    with pytest.raises(RuntimeError, match="b must be on the same device as a"):
        ik.skinny_gemm_fp8(a, b.cpu(), sa, sb)
    with pytest.raises(RuntimeError, match="scale_a must be on the same device as a"):
        ik.skinny_gemm_fp8(a, b, sa.cpu(), sb)
    with pytest.raises(RuntimeError, match="scale_b must be on the same device as a"):
        ik.skinny_gemm_fp8(a, b, sa, sb.cpu())
    with pytest.raises(RuntimeError, match="bias must be on the same device as a"):
        ik.skinny_gemm_fp8(a, b, sa, sb, bias=torch.zeros(8).bfloat16())
    with pytest.raises(RuntimeError, match="out must be on the same device as a"):
        ik.skinny_gemm_fp8(a, b, sa, sb, out=torch.empty(4, 8, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="a must be a CUDA tensor, got one on cpu"):
        ik.ops.skinny_gemm_fp8(torch.empty(4, 8, device=device, dtype=torch.bfloat16), a.cpu(),
                               b, sa, sb, None)


def test_rejects_bad_config(ik, device):
    cuda_only(device)
    a, b = rand_fp8((4, 64), device), rand_fp8((8, 64), device)
    sa, sb = scales(8, device, False)
    out = torch.empty(4, 8, device=device, dtype=torch.bfloat16)
    for cfg, msg in (([3, 3], "tiles_per_block \\* warps_per_tile must be at most 8"),
                     ([1, 1, 9], "cluster must be 0 \\(automatic\\) to 8, got 9"),
                     ([0, 0, 1, 9], "convert must be 0 \\(automatic\\) or 1 to 8, got 9"),
                     ([1, 1, 1, 1, 1], "config holds at most 4 values")):
        with pytest.raises(RuntimeError, match=msg):
            ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, None, cfg)
    a17, out17 = rand_fp8((17, 64), device), torch.empty(17, 8, device=device, dtype=torch.bfloat16)
    a33, out33 = rand_fp8((33, 64), device), torch.empty(33, 8, device=device, dtype=torch.bfloat16)
    for cvt in (4, 5, 6):
        with pytest.raises(RuntimeError, match=f"convert {cvt} \\(wgmma\\) takes at most 32 rows of a, got 33"):
            ik.ops.skinny_gemm_fp8(out33, a33, b, sa, sb, None, [0, 0, 0, cvt])
    for cfg in ([1, 0, 0, 5], [0, 2, 0, 5]):
        with pytest.raises(RuntimeError, match="convert 5 takes tiles_per_block 0 and warps_per_tile 0 "
                                               f"\\(automatic\\), 3 or 4 \\(ring slots\\), got {cfg[0]} and {cfg[1]}"):
            ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, None, cfg)
    for cfg in ([3, 0, 0, 6], [0, 6, 2, 6]):
        with pytest.raises(RuntimeError, match="convert 6 takes tiles_per_block 0 \\(automatic\\), 1 or 2 \\(consumer "
                                               "warpgroups of 64 weight rows a block\\) and warps_per_tile 0 "
                                               "\\(automatic\\), 1, 2, 3, 4 or 5 \\(the epilogue: partials by element, "
                                               "by weight row, direct, pushed rank to rank, or swapped between two "
                                               f"ranks\\), got {cfg[0]} and {cfg[1]}"):
            ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, None, cfg)
    with pytest.raises(RuntimeError, match="convert 7 \\(whole weight rows a block\\) takes at most 2 rows of a, got 4"):
        ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, None, [0, 0, 0, 7])
    a1, out1 = rand_fp8((1, 64), device), torch.empty(1, 8, device=device, dtype=torch.bfloat16)
    for cfg in ([3, 0, 0, 7], [0, 3, 0, 7], [8, 0, 0, 7], [0, 0, 2, 7]):
        with pytest.raises(RuntimeError, match="convert 7 takes tiles_per_block 0 \\(automatic\\), 1, 2 or 4 "
                                               "\\(weight rows a block\\), warps_per_tile 0 \\(automatic\\), 1, 2 or 4 "
                                               "\\(16-byte segments of each row a thread keeps in flight\\) and "
                                               f"cluster 0 or 1, got {cfg[0]}, {cfg[1]} and {cfg[2]}"):
            ik.ops.skinny_gemm_fp8(out1, a1, b, sa, sb, None, cfg)
    with pytest.raises(RuntimeError, match="convert 8 \\(whole weight rows a block, wgmma\\) takes one row of a, got 4"):
        ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, None, [0, 0, 0, 8])
    for cfg in ([3, 0, 0, 8], [16, 0, 0, 8], [0, 3, 0, 8], [0, 0, 2, 8]):
        with pytest.raises(RuntimeError, match="convert 8 takes tiles_per_block 0 \\(automatic\\), 1, 2, 4 or 8 \\(weight "
                                               "rows a block\\), warps_per_tile 0 \\(automatic\\), 1 or 2 \\(groups of "
                                               f"8 steps in flight a lane\\) and cluster 0 or 1, got {cfg[0]}, {cfg[1]} "
                                               f"and {cfg[2]}"):
            ik.ops.skinny_gemm_fp8(out1, a1, b, sa, sb, None, cfg)
    a_long, b_long = rand_fp8((1, 131072 + 16), device), rand_fp8((8, 131072 + 16), device)
    with pytest.raises(RuntimeError, match="convert 8 keeps the row of a in shared memory: K at most 131072, got 131088"):
        ik.ops.skinny_gemm_fp8(out1, a_long, b_long, sa, sb, None, [0, 0, 0, 8])
    with pytest.raises(RuntimeError, match="convert 6's direct epilogue \\(warps_per_tile 3\\) takes no K split "
                                           "\\(cluster 0 or 1\\), got cluster 2"):
        ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, None, [0, 3, 2, 6])
    with pytest.raises(RuntimeError, match="one group of chunks in flight past 16 rows of a \\(warps_per_tile 0 "
                                           "or 1\\), got warps_per_tile 2 at 17 rows"):
        ik.ops.skinny_gemm_fp8(out17, a17, b, sa, sb, None, [0, 2, 0, 4])
    with pytest.raises(RuntimeError, match="convert 4 takes tiles_per_block 0 \\(automatic\\), 1 or 2"):
        ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, None, [4, 0, 0, 4])
    with pytest.raises(RuntimeError, match="warps_per_tile 0 \\(automatic\\), 1 or 2 \\(groups of 8 chunks in "
                                           "flight a lane\\), got 1 and 3"):
        ik.ops.skinny_gemm_fp8(out, a, b, sa, sb, None, [1, 3, 0, 4])
    # convert 4 keeps each block's share of a's K in shared memory (227 KB on Hopper)
    a16, out16 = rand_fp8((16, 16384), device), torch.empty(16, 8, device=device, dtype=torch.bfloat16)
    b16 = rand_fp8((8, 16384), device)
    with pytest.raises(RuntimeError, match="needs a cluster \\(K split\\) of at least 2, got 1"):
        ik.ops.skinny_gemm_fp8(out16, a16, b16, sa, sb, None, [0, 0, 1, 4])
    k_long = 8 * 224 * 64
    with pytest.raises(RuntimeError, match=f"K = {k_long} at 16 rows does not fit even at a cluster of 8"):
        ik.ops.skinny_gemm_fp8(out16, rand_fp8((16, k_long), device), rand_fp8((8, k_long), device),
                               sa, sb, None, [0, 0, 0, 4])
    # convert 5 keeps its ring (3 slots of 32 KB) beside that share: at M = 32 and K = 16384
    # the share of a split of 4 (128 KB) no longer fits
    a32, out32 = rand_fp8((32, 16384), device), torch.empty(32, 8, device=device, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="convert 5 at K = 16384 and 32 rows of a needs a cluster \\(K split\\) "
                                           "of at least 5, got 4"):
        ik.ops.skinny_gemm_fp8(out32, a32, b16, sa, sb, None, [0, 0, 4, 5])
    k_long = 8 * 64 * 64
    with pytest.raises(RuntimeError, match=f"K = {k_long} at 32 rows does not fit even at a cluster of 8"):
        ik.ops.skinny_gemm_fp8(out32, rand_fp8((32, k_long), device), rand_fp8((8, k_long), device),
                               sa, sb, None, [0, 0, 0, 5])
