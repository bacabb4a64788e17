"""Programmatic dependent launch between the package's CUDA kernels (cuda_kernels/launch.cuh).

A kernel may start before the one before it in the stream has ended; it must wait for
that kernel's writes before it reads or writes anything but an L2 prefetch. A kernel that
read its input early, or wrote over what the kernel before still reads, would give other
bits than the same ops launched one after another (IK_PDL=0, read at each launch), so every
test here runs a chain on fresh inputs with the dependent launches as chosen (IK_PDL=1),
with every kernel a dependent (2) and plainly (0), and asks for the same bits:
- read after write: norm -> GEMM -> SwiGLU -> GEMM (the decode MLP), every GEMM convert;
  LayerNorm -> RMSNorm -> Q4_K gemv;
- a weight written by the kernel right before the kernel that prefetches it (our own
  silu_and_mul_fp8 writing the GEMM's fp8 weight, or the tiled Q4_K bytes);
- write after read: a kernel writing over the input of the kernel before;
- the decode MLP captured in a CUDA graph with the dependent launches, replayed on new
  inputs.
"""

import pytest
import torch

FP8 = torch.float8_e4m3fn


@pytest.fixture
def cuda(device):
    if device != "cuda":
        pytest.skip("CUDA only: programmatic dependent launch")
    return device


def rand_fp8(shape, std=3.0):
    return (torch.randn(shape, device="cuda") * std).to(FP8)


def both_ways(monkeypatch, run):
    """run() with the dependent launches as chosen (IK_PDL=1), then without (0); both results
    (tuples of tensors). Also with every kernel a dependent (2, the experiment switch), whose
    bits must equal the plain ones too."""
    got = {}
    for mode in ("1", "2", "0"):
        monkeypatch.setenv("IK_PDL", mode)
        got[mode] = run()
        torch.cuda.synchronize()
    monkeypatch.delenv("IK_PDL")
    assert_same_bits(got["2"], got["0"])
    return got["1"], got["0"]


def assert_same_bits(on, off):
    for a, b in zip(on, off):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), "a dependent launch changed the bits"


class Mlp:
    """The decode MLP at hidden H, intermediate I: rms_norm_fp8 -> gate_up -> silu_and_mul_fp8
    -> down, the GEMMs through `cfg` (the op's config: [tiles_per_block, warps_per_tile,
    cluster, convert], [] for the launcher's own)."""

    def __init__(self, ik, m, hidden, inter, cfg):
        self.ik, self.cfg = ik, cfg
        self.x = torch.randn(m, hidden, device="cuda", dtype=torch.float16)
        self.wn = (1 + 0.1 * torch.randn(hidden, device="cuda")).half()
        self.wgu, self.wd = rand_fp8((2 * inter, hidden)), rand_fp8((hidden, inter))
        self.s1, self.s2 = torch.tensor([0.02], device="cuda"), torch.tensor([0.002], device="cuda")
        self.sgu, self.sd = torch.tensor([0.02 / 16], device="cuda"), torch.tensor([0.02 / 16], device="cuda")
        self.h = torch.empty(m, 2 * inter, device="cuda", dtype=torch.float16)
        self.y = torch.empty(m, hidden, device="cuda", dtype=torch.float16)

    def __call__(self):
        ik = self.ik
        q1 = ik.rms_norm_fp8(self.x, self.wn, self.s1)
        ik.ops.skinny_gemm_fp8(self.h, q1, self.wgu, self.s1, self.sgu, None, self.cfg)
        q2 = ik.silu_and_mul_fp8(self.h, self.s2)
        ik.ops.skinny_gemm_fp8(self.y, q2, self.wd, self.s2, self.sd, None, self.cfg)
        return q1, self.h.clone(), q2, self.y.clone()


# (m, hidden, intermediate, cfg): the default at M = 1 (convert 7's persistent blocks at K
# 16384, with their L2 prefetch), M = 2 and 8, and every convert forced.
MLP_CASES = [(1, 16384, 1040, []), (2, 16384, 1040, []), (8, 4096, 2064, []),
             (24, 4096, 2064, [0, 0, 0, 3]), (1, 4096, 2064, [0, 0, 0, 4]), (1, 4096, 2064, [0, 0, 0, 5]),
             (8, 4096, 2064, [0, 0, 0, 6]), (2, 4096, 2064, [0, 0, 0, 7]), (1, 4096, 2064, [0, 0, 0, 8]),
             (3, 4096, 2064, [0, 0, 0, 1]), (3, 4096, 2064, [0, 0, 0, 2])]


@pytest.mark.parametrize("m,hidden,inter,cfg", MLP_CASES)
def test_decode_mlp_chain(ik, cuda, monkeypatch, m, hidden, inter, cfg):
    if cfg[3:] == [8] and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("convert 8 runs on Hopper")
    mlp = Mlp(ik, m, hidden, inter, cfg)
    for _ in range(3):
        mlp.x.copy_(torch.randn_like(mlp.x) * 4)
        mlp.wgu.copy_(rand_fp8(mlp.wgu.shape))  # a torch kernel writes the weight right before
        on, off = both_ways(monkeypatch, mlp)
        assert_same_bits(on, off)
    assert torch.isfinite(on[3].float()).all()


def test_weight_written_by_the_kernel_before(ik, cuda, monkeypatch):
    """silu_and_mul_fp8 writes the fp8 weight that the GEMM right after reads (convert 7's
    persistent blocks prefetch it into L2 before their wait; convert 8 and 6 launch plainly)."""
    n, k = 2304, 16384
    src = torch.empty(n, 2 * k, device="cuda", dtype=torch.float16)
    w = torch.empty(n, k, device="cuda", dtype=FP8)
    s = torch.tensor([0.05], device="cuda")
    sb = torch.tensor([1.0], device="cuda")
    for m, cfg in [(1, []), (2, []), (1, [0, 0, 0, 8]), (8, [0, 0, 0, 6])]:
        a = rand_fp8((m, k))
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

        def run():
            ik.silu_and_mul_fp8(src, s, out=w)
            ik.ops.skinny_gemm_fp8(out, a, w, s, sb, None, cfg)
            return (out.clone(),)

        for _ in range(3):
            src.copy_(torch.randn_like(src) * 3)
            on, off = both_ways(monkeypatch, run)
            assert_same_bits(on, off)
            # and the product is of the weight just written, not of the last one
            ref = (a.float() @ w.float().t()) * 0.05
            torch.testing.assert_close(on[0].float(), ref, rtol=2e-2, atol=2e-2 * ref.abs().max().item())


def test_kernel_writes_over_the_input_of_the_kernel_before(ik, cuda, monkeypatch):
    """rms_norm reads x; the next kernel (rms_norm with out=x, then fused_add_rms_norm in
    place) writes x: the first result must be of the x it read."""
    x = torch.empty(2048, 8192, device="cuda", dtype=torch.float16)
    z = torch.empty_like(x)
    res = torch.empty_like(x)
    w = (1 + 0.1 * torch.randn(8192, device="cuda")).half()

    def run():
        x.copy_(x0)
        y1 = ik.rms_norm(x, w)
        ik.rms_norm(z, w, out=x)
        y2 = ik.layer_norm(res, w, w)
        ik.fused_add_rms_norm(res, x, w)
        return y1, y2, x.clone(), res.clone()

    for _ in range(3):
        x0 = torch.randn_like(x) * 3
        z.copy_(torch.randn_like(z))
        res.copy_(torch.randn_like(res))
        r0 = res.clone()

        def fresh():
            res.copy_(r0)
            return run()

        on, off = both_ways(monkeypatch, fresh)
        assert_same_bits(on, off)
        torch.testing.assert_close(on[0], ik.rms_norm(x0, w), rtol=0, atol=0)


def test_q4k_bytes_written_by_the_kernel_before(ik, cuda, monkeypatch):
    """The tiled gemv prefetches its first tile blocks into L2 before its wait: here the
    kernel right before (silu_and_mul_fp8 into the bytes viewed as fp8) writes them."""
    n, k = 1024, 4096
    qt = ik.tile_q4k(ik.quantize_q4_k(torch.randn(n, k) * 0.02).cuda())
    as_fp8 = qt.view(FP8).reshape(-1, 2304)
    src = torch.empty(as_fp8.shape[0], 2 * 2304, device="cuda", dtype=torch.float16)
    s = torch.tensor([1.0], device="cuda")
    x = torch.randn(1, k, device="cuda", dtype=torch.float16)

    def run():
        ik.silu_and_mul_fp8(src, s, out=as_fp8)
        return (ik.q4k_gemv(x, qt, n),)

    for _ in range(3):
        src.copy_(torch.randn_like(src) * 0.5)
        on, off = both_ways(monkeypatch, run)
        assert_same_bits(on, off)


def test_norms_into_q4k_gemv(ik, cuda, monkeypatch):
    n, k = 4096 + 16, 4096
    qt = ik.tile_q4k(ik.quantize_q4_k(torch.randn(n, k) * 0.02).cuda())
    x = torch.empty(1, k, device="cuda", dtype=torch.float16)
    w = (1 + 0.1 * torch.randn(k, device="cuda")).half()

    def run():
        h = ik.layer_norm(x, w, w)
        h = ik.rms_norm(h, w)
        return h, ik.q4k_gemv(h, qt, n)

    for _ in range(3):
        x.copy_(torch.randn_like(x) * 2)
        on, off = both_ways(monkeypatch, run)
        assert_same_bits(on, off)


@pytest.mark.parametrize("mode", ["1", "2"])
@pytest.mark.parametrize("m,hidden,inter,cfg", [(1, 16384, 1040, []), (8, 4096, 2064, [])])
def test_decode_mlp_graph(ik, cuda, monkeypatch, m, hidden, inter, cfg, mode):
    """Captured with the dependent launches (graph edges of the programmatic kind), replayed
    on new inputs: the bits of the eager chain without them. The chain starts after a copy
    (a memcpy node, not a kernel) and a fill."""
    mlp = Mlp(ik, m, hidden, inter, cfg)
    src = torch.empty_like(mlp.x)
    monkeypatch.setenv("IK_PDL", mode)
    mlp()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mlp.x.copy_(src)
        mlp.h.zero_()
        q1 = ik.rms_norm_fp8(mlp.x, mlp.wn, mlp.s1)
        ik.ops.skinny_gemm_fp8(mlp.h, q1, mlp.wgu, mlp.s1, mlp.sgu, None, cfg)
        q2 = ik.silu_and_mul_fp8(mlp.h, mlp.s2)
        ik.ops.skinny_gemm_fp8(mlp.y, q2, mlp.wd, mlp.s2, mlp.sd, None, cfg)
    monkeypatch.setenv("IK_PDL", "0")
    for _ in range(3):
        src.copy_(torch.randn_like(mlp.x) * 4)
        mlp.y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        got = mlp.y.clone()
        expect = mlp()[3]
        assert torch.equal(got, expect)
