"""The ops as torch sees them: schema/fake checks (opcheck), torch.compile, the layer."""

import pytest
import torch

from reference import assert_close, rms_norm_ref

EPS = 1e-6


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(ik, device, dtype):
    x = torch.randn(5, 257, device=device, dtype=dtype)
    r = torch.randn(5, 257, device=device, dtype=dtype)
    w = torch.randn(257, device=device, dtype=dtype)
    torch.library.opcheck(ik.ops.rms_norm, (torch.empty_like(x), x, w, EPS))
    torch.library.opcheck(ik.ops.fused_add_rms_norm, (x.clone(), r.clone(), w, EPS))


class Block(torch.nn.Module):
    """A residual block as a decoder layer uses the norms."""

    def __init__(self, ik, hidden, dtype, device):
        super().__init__()
        self.ik = ik
        self.norm = ik.layers.RMSNorm()
        self.norm.weight = torch.nn.Parameter(torch.randn(hidden, dtype=dtype, device=device))
        self.norm.variance_epsilon = EPS
        self.proj = torch.nn.Linear(hidden, hidden, dtype=dtype, device=device)

    def forward(self, x, residual):
        h = self.proj(self.norm(x))
        self.ik.fused_add_rms_norm(h, residual, self.norm.weight, EPS)
        return h, residual


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_compile_fullgraph(ik, device, dtype):
    torch._dynamo.reset()
    block = Block(ik, 384, dtype, device)
    x = torch.randn(3, 7, 384, dtype=dtype, device=device)
    r = torch.randn(3, 7, 384, dtype=dtype, device=device)
    with torch.no_grad():
        eager_h, eager_r = block(x.clone(), r.clone())
        compiled = torch.compile(block, fullgraph=True)
        h, res = compiled(x.clone(), r.clone())
    torch.testing.assert_close(res, eager_r, rtol=0, atol=0)
    torch.testing.assert_close(h, eager_h, rtol=1e-2, atol=1e-2)


def test_layer_matches_reference(ik, device):
    layer = ik.layers.RMSNorm()
    layer.weight = torch.nn.Parameter(torch.randn(1000, device=device))
    layer.variance_epsilon = 1e-5
    x = torch.randn(4, 1000, device=device)
    assert_close(layer(x), rms_norm_ref(x, layer.weight.detach(), 1e-5), torch.float32)


def test_layer_contract(ik):
    """What `kernels` requires of a layer: no __init__, no extra members, HF's forward."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    cls = ik.layers.RMSNorm
    assert cls.__init__ is torch.nn.Module.__init__
    assert cls.can_torch_compile is True and cls.has_backward is False
    import inspect

    ours = list(inspect.signature(cls.forward).parameters)
    theirs = list(inspect.signature(LlamaRMSNorm.forward).parameters)
    assert ours == theirs
