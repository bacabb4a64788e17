"""kernelize a tiny randomly initialised Llama with our RMSNorm layer; helpers the
other layers' kernelize tests share."""

import pytest
import torch

from conftest import ROOT


def tiny_llama(device, dtype=torch.float32, *, intermediate=688, layers=2, vocab=512, seed=0):
    """A random-init Llama with hidden 256 (4 heads, 2 KV heads); seed None: the test's own."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=256, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=False)
    if seed is not None:
        torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()


def kernelize_with(model, device, **layers):
    """kernelize `model` with our layers, by Hub name: kernelize_with(m, "cpu", SiLU="Silu")."""
    from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_mapping

    mapping = {hub_name: {device: LocalLayerRepository(repo_path=ROOT / "build", layer_name=layer)}
               for hub_name, layer in layers.items()}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE, device=device)


def count_calls(op, fn):
    """fn()'s result, and how many times it ran the op overload `op` (under no_grad)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls = 0

    class CountOp(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            nonlocal calls
            calls += func is op
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), CountOp():
        result = fn()
    return result, calls


def kernelized_tiny_llama(op, device, dtype, **layers):
    """A tiny Llama's logits before and after kernelize_with(**layers), and how many times
    the kernelized forward ran `op`. Returns (model, ref, logits, calls)."""
    model = tiny_llama(device, dtype)
    ids = torch.randint(0, 512, (2, 33), device=device)
    with torch.no_grad():
        ref = model(ids).logits.float()
    kernelize_with(model, device, **layers)
    logits, calls = count_calls(op, lambda: model(ids).logits.float())
    return model, ref, logits, calls


def relative_error(out, ref):
    return ((out - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernelize_tiny_llama(ik, device, dtype):
    model, ref, logits, calls = kernelized_tiny_llama(ik.ops.rms_norm.default, device, dtype,
                                                      RMSNorm="RMSNorm")
    # One call of our op per RMSNorm module per forward.
    n_norms = sum(type(m).__name__ == "LlamaRMSNorm" for m in model.modules())
    assert n_norms == 2 * 2 + 1
    assert calls == n_norms, f"our rms_norm ran {calls} times for {n_norms} RMSNorm layers"
    err = relative_error(logits, ref)
    assert err < (1e-4 if dtype == torch.float32 else 5e-2), f"logits relative error {err:.3g}"
