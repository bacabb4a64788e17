"""Load the local build as a user would, kernelize a tiny Llama, check it, time it.

Run through `make demo` (it builds first). Nothing is downloaded: the model is a
randomly initialised LlamaForCausalLM built from a LlamaConfig.
"""

import logging
import os
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
REPO_ID = "inference-kernels/inference-kernels"
os.environ.setdefault("LOCAL_KERNELS", f"{REPO_ID}={ROOT / 'build'}")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kernels import LocalLayerRepository, Mode, get_kernel, kernelize, use_kernel_mapping  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402


class CountCalls(TorchDispatchMode):
    """Counts how often one op runs underneath a forward pass."""

    def __init__(self, op):
        super().__init__()
        self.op, self.calls = op, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += func is self.op
        return func(*args, **(kwargs or {}))


def timeit(fn, device, reps=50):
    for _ in range(5):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps * 1e6


def hf_rms_norm(x, w, eps):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def main():
    # kernelize warns for every layer we do not map (SiLU, rotary_pos_emb): expected here.
    logging.getLogger("kernels").setLevel(logging.ERROR)
    ik = get_kernel(REPO_ID, version=1)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    print(f"loaded {ik.__name__} for {device}")

    config = LlamaConfig(vocab_size=1024, hidden_size=512, intermediate_size=1376,
                         num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                         max_position_embeddings=256, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    ids = torch.randint(0, config.vocab_size, (2, 64), device=device)
    with torch.inference_mode():
        ref = model(ids).logits.float()
        t_ref = timeit(lambda: model(ids), device, reps=10)

    mapping = {"RMSNorm": {device: LocalLayerRepository(repo_path=ROOT / "build", layer_name="RMSNorm")}}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE, device=device)

    counter = CountCalls(ik.ops.rms_norm.default)
    with torch.inference_mode(), counter:
        logits = model(ids).logits.float()
    n_norms = 2 * config.num_hidden_layers + 1
    err = ((logits - ref).norm() / ref.norm()).item()
    print(f"kernelized: our rms_norm ran {counter.calls} times for {n_norms} RMSNorm layers; "
          f"logits relative error vs un-kernelized: {err:.2e}")
    assert counter.calls == n_norms, "kernelize did not route every RMSNorm to our kernel"
    assert err < (1e-4 if dtype == torch.float32 else 5e-2), "logits differ from the reference"
    with torch.inference_mode():
        t_ours = timeit(lambda: model(ids), device, reps=10)

    print(f"\ntiny Llama forward ({device}, {str(dtype)[6:]}): {t_ref:9.1f} us un-kernelized, "
          f"{t_ours:9.1f} us kernelized")
    print("\nRMSNorm alone (wall clock per call, not a benchmark; see benchmarks/):")
    print(f"{'rows x hidden':>16} {'HF eager us':>12} {'ours us':>10} {'speedup':>8}")
    for rows, hidden in [(1, 4096), (64, 4096), (1024, 4096)]:
        x = torch.randn(rows, hidden, device=device, dtype=dtype)
        w = torch.randn(hidden, device=device, dtype=dtype)
        with torch.inference_mode():
            t_hf = timeit(lambda: hf_rms_norm(x, w, 1e-5), device)
            t_ik = timeit(lambda: ik.rms_norm(x, w, 1e-5), device)
        print(f"{rows:>7} x {hidden:<6} {t_hf:12.1f} {t_ik:10.1f} {t_hf / t_ik:7.2f}x")


if __name__ == "__main__":
    main()
