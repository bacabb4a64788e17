"""kernelize a tiny randomly initialised Llama with our RMSNorm layer."""

import pytest
import torch

from conftest import ROOT


def tiny_llama(device, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=688,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernelize_tiny_llama(ik, device, dtype):
    from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_mapping

    model = tiny_llama(device, dtype)
    ids = torch.randint(0, 512, (2, 33), device=device)
    with torch.no_grad():
        ref = model(ids).logits.float()

    repo = LocalLayerRepository(repo_path=ROOT / "build", layer_name="RMSNorm")
    mapping = {"RMSNorm": {device: repo}}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE, device=device)

    # Count calls of our op: one per RMSNorm module per forward.
    n_norms = sum(type(m).__name__ == "LlamaRMSNorm" for m in model.modules())
    calls = 0
    op = ik.ops.rms_norm.default

    from torch.utils._python_dispatch import TorchDispatchMode

    class CountOp(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            nonlocal calls
            calls += func is op
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), CountOp():
        logits = model(ids).logits.float()
    assert n_norms == 2 * 2 + 1
    assert calls == n_norms, f"our rms_norm ran {calls} times for {n_norms} RMSNorm layers"
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    err = ((logits - ref).norm() / ref.norm()).item()
    assert err < tol, f"logits relative error {err:.3g}"
