"""The public matmul op on the CPU (its Metal kernels are the shaders matmul_tiled and
matmul_simdgroup, run under the MSL harness in test_metal_harness.py): against fp64, every
dtype, odd sizes, any input layout; errors; opcheck and torch.compile."""

import pytest
import torch

from reference import assert_close, poisoned_like

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture
def cpu(device):
    if device != "cpu":
        pytest.skip("matmul has CPU and Metal (MPS) kernels, no CUDA one")
    return device


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul(ik, cpu, dtype):
    for m, n, k in [(1, 1, 1), (17, 33, 65), (65, 17, 33), (3, 1000, 7), (8, 8, 8)]:
        a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        out = poisoned_like(torch.empty(m, n, dtype=dtype))
        assert ik.matmul(a, b, out=out) is out
        assert_close(out, a.double() @ b.double(), dtype)
        assert torch.equal(ik.matmul(a, b), out)


def test_matmul_rounds_once(ik, cpu):
    """fp32 accumulation: fp16 products that overflow or cancel in fp16 do not here."""
    a = torch.tensor([[60000.0, 60000.0, -60000.0]], dtype=torch.float16)
    b = torch.ones(3, 1, dtype=torch.float16)
    assert ik.matmul(a, b).item() == 60000.0


def test_matmul_any_input_layout(ik, cpu):
    a = torch.randn(40, 23).t()  # [23, 40], transposed
    b = torch.randn(40, 90)[:, ::3]  # column slice with stride 3
    assert_close(ik.matmul(a, b), a.double() @ b.double(), torch.float32)


def test_matmul_empty(ik, cpu):
    assert ik.matmul(torch.randn(0, 5), torch.randn(5, 3)).shape == (0, 3)
    assert torch.equal(ik.matmul(torch.randn(4, 0), torch.randn(0, 3)), torch.zeros(4, 3))


def test_matmul_rejects_bad_inputs(ik, cpu):
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        ik.matmul(a.double(), b.double())
    with pytest.raises(RuntimeError, match=r"a must be 2-D \[M, K\], got shape \[4, 8, 1\]"):
        ik.matmul(a[..., None], b)
    with pytest.raises(RuntimeError, match=r"b must be 2-D \[K, N\] with K = 8 .*got shape \[7, 3\]"):
        ik.matmul(a, torch.randn(7, 3))
    with pytest.raises(RuntimeError, match="b must have the dtype of a"):
        ik.matmul(a, b.half())
    with pytest.raises(RuntimeError, match=r"out must have shape \[4, 3\]"):
        ik.matmul(a, b, out=torch.empty(3, 4))
    with pytest.raises(RuntimeError, match="out must be contiguous"):
        ik.matmul(a, b, out=torch.empty(3, 4).t())
    with pytest.raises(RuntimeError, match="out must have the dtype of a"):
        ik.matmul(a, b, out=torch.empty(4, 3, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="b must be on the same device as a"):
        ik.matmul(a, torch.randn(8, 3, device="meta"))
    with pytest.raises(RuntimeError, match="out must not overlap a, got views that share some elements"):
        buf = torch.randn(32)
        ik.ops.matmul(buf[:12].view(4, 3), buf.view(4, 8), torch.randn(8, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_opcheck_and_compile(ik, cpu, dtype):
    a, b = torch.randn(5, 9).to(dtype), torch.randn(9, 7).to(dtype)
    torch.library.opcheck(ik.ops.matmul, (torch.empty(5, 7, dtype=dtype), a, b))
    compiled = torch.compile(lambda a, b: ik.matmul(a, b) + 1, fullgraph=True)
    assert torch.equal(compiled(a, b), ik.matmul(a, b) + 1)
