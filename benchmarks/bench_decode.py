"""End-to-end decode: a Llama-shaped model with our layers, without, and with Liger's.

A randomly initialised LlamaForCausalLM (bf16; hidden 4096, intermediate 14336, 8 layers
by default, so each layer has Llama-3-8B's shapes) decodes greedily after a prefill:
  hf     transformers as it is (eager attention, no kernel layers);
  ours   kernelize with our RMSNorm and LlamaMLP layers (LlamaMLP made kernelizable
         with kernels.replace_kernel_forward_from_hub, since transformers 5.22 does not
         mark it);
  liger  liger_kernel.transformers.apply_liger_kernel_to_llama (RMSNorm and SwiGLU).
Two tables:
  eager  wall clock of `--new` decode steps (one forward with the KV cache each, CUDA
         synchronised at the end), after one warm-up generation; tokens/s = batch * new /
         time. Python's time a step is in it: at these sizes it is most of it.
  graph  one decode step with transformers' StaticCache captured in a CUDA graph and
         timed as replays (time_step): the GPU's time a token, tokens/s = batch / time.
         With --compile, hf and ours also with the step compiled whole.
Each variant's first decode logits are compared with hf's.

    python benchmarks/bench_decode.py --batch 1 32 --compile     # on the GPU
    python benchmarks/bench_decode.py --cpu-smoke
"""

from __future__ import annotations

import argparse
import copy
import logging
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402


def build_model(args, device, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                         intermediate_size=args.intermediate, num_hidden_layers=args.layers,
                         num_attention_heads=args.hidden // 128, num_key_value_heads=max(1, args.hidden // 512),
                         max_position_embeddings=args.prompt + args.new + 8, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: an 8B model's init is minutes on a CPU
        model = LlamaForCausalLM(config)
    return model.to(dtype=dtype).eval()


def kernelize_ours(model, device):
    from kernels import LocalLayerRepository, Mode, kernelize, replace_kernel_forward_from_hub, use_kernel_mapping
    from transformers.models.llama.modeling_llama import LlamaMLP

    replace_kernel_forward_from_hub(LlamaMLP, "LlamaMLP")
    build = harness.REPO / "build"
    mapping = {name: {device: LocalLayerRepository(repo_path=build, layer_name=name)}
               for name in ("RMSNorm", "LlamaMLP")}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        return kernelize(model, mode=Mode.INFERENCE, device=device)


def fuse_residuals(model, ik):
    """EXPERIMENT (this benchmark only, not a package layer): `model` (kernelized with ours)
    with each decoder layer's two residual adds folded into kernels that run anyway: the
    add after attention into the post-attention RMSNorm (`fused_add_rms_norm`, the sum
    written over the layer's input), the add after the MLP into the down projection
    (`torch.addmm` with the sum as C, one rounding of both). What transformers' layer costs
    us under torch.compile: Inductor fuses each add into the RMSNorm after it, which our
    RMSNorm layer, handed the sum, cannot. Overwrites each layer's input: only for models
    run without output_hidden_states."""
    import types

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache=False, position_embeddings=None, **kwargs):
        residual = hidden_states
        h, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states), attention_mask=attention_mask,
                              position_ids=position_ids, past_key_values=past_key_values, use_cache=use_cache,
                              position_embeddings=position_embeddings, **kwargs)
        norm = self.post_attention_layernorm
        ik.fused_add_rms_norm(h, residual, norm.weight, norm.variance_epsilon)  # residual += h; h = norm(residual)
        mlp = self.mlp
        act = ik.silu_mul(mlp.gate_proj(h), mlp.up_proj(h))
        shape = residual.shape
        return torch.addmm(residual.reshape(-1, shape[-1]), act.reshape(-1, act.shape[-1]),
                           mlp.down_proj.weight.t()).view(shape)

    for layer in model.model.layers:
        assert layer.mlp.down_proj.bias is None
        layer.forward = types.MethodType(forward, layer)
    return model


def apply_liger(model):
    from liger_kernel.transformers import apply_liger_kernel_to_llama

    apply_liger_kernel_to_llama(rope=False, cross_entropy=False, fused_linear_cross_entropy=False,
                                rms_norm=True, swiglu=True, model=model)
    return model


@torch.no_grad()
def time_step(model, ids, nxt, max_len, compiled=False, timed=True):
    """Prefill `ids`, then time one decode step of tokens `nxt` [batch, 1] with
    transformers' StaticCache (harness.time_us: a CUDA graph of 8 steps, replayed);
    returns (Timing or None when not `timed`, the step's logits, the step)."""
    from transformers import StaticCache

    dev = ids.device
    cache = StaticCache(config=model.config, max_cache_len=max_len)
    out = model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(ids.shape[1], device=dev),
                use_cache=True)
    del out
    pos = torch.tensor([ids.shape[1]], device=dev)
    fwd = torch.compile(model, fullgraph=True, dynamic=False) if compiled else model

    def step():
        # Every call decodes position `prompt` again: the static layers' write position
        # (a device tensor each advances in place) is reset first, inside the graph too.
        for layer in cache.layers:
            layer.cumulative_length.fill_(ids.shape[1])
        return fwd(input_ids=nxt, past_key_values=cache, cache_position=pos, use_cache=True).logits

    logits = step().float()
    timing = harness.time_us(lambda i: step(), 1, device=dev, min_calls=8, trials=7) if timed else None
    return timing, logits, step


def graph_table(args, variants, dev, dtype, md):
    """One decode step a variant in a CUDA graph: the GPU's time a token, which the eager
    table cannot show (its steps wait on Python). With --compile, hf and ours also with
    the step compiled whole (torch.compile fullgraph), the graph capture still ours."""
    runs = [(name, name, False) for name in variants]
    if args.compile:
        runs += [(f"{name} compiled", name, True) for name in ("hf", "ours", "ours+res") if name in variants]
    rows, names = [], [r[0] for r in runs]
    for batch in args.batch:
        ids = torch.randint(0, args.vocab, (batch, args.prompt), device=dev)
        nxt = torch.randint(0, args.vocab, (batch, 1), device=dev)
        us, ref = {}, None
        for label, name, compiled in runs:
            try:
                t, logits, _ = time_step(variants[name], ids, nxt, args.prompt + 8, compiled=compiled)
            except Exception as e:  # noqa: BLE001 - a variant that cannot compile or capture drops out
                print(f"  batch {batch}: {label} failed ({type(e).__name__}: {str(e)[:200]})")
                continue
            us[label] = t
            note = "" if t.method == "cuda-graph" else f" ({t.method}{': ' + t.note if t.note else ''})"
            logits = logits[:, -1]
            if ref is None:
                ref = logits
                print(f"  batch {batch}: {label} {t.us:.1f} us a step{note}")
            else:
                err = ((logits - ref).norm() / ref.norm()).item()
                print(f"  batch {batch}: {label} {t.us:.1f} us a step{note}, logits vs hf rel. err {err:.2e}")
        row = [batch] + [f"{us[k].us:.1f}" if k in us else "-" for k in names]
        row += [f"{batch / us[k].us * 1e6:.0f}" if k in us else "-" for k in names]
        pairs = [("ours", k) for k in names if k not in ("ours", "ours compiled") and not k.startswith("ours+res")]
        if "ours compiled" in us:
            pairs += [("ours compiled", k) for k in ("hf compiled", "liger")]
        if "ours+res compiled" in us:
            pairs += [("ours+res", "hf"), ("ours+res compiled", "hf compiled")]
        row += [harness.ratio(us.get(b), us.get(a)) for a, b in pairs]
        rows.append(row)
    headers = (["batch"] + [f"{k} us/step" for k in names] + [f"{k} tok/s" for k in names]
               + [f"{b}/{a}" for a, b in pairs])
    harness.print_table(headers, rows, "decode step in a CUDA graph (StaticCache; GPU time a token)", md)


@torch.inference_mode()
def decode(model, ids, new):
    """Prefill, then `new` greedy steps; returns (seconds for the steps, first-step logits)."""
    out = model(ids, use_cache=True)
    cache, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
    first = None
    sync = torch.cuda.synchronize if ids.is_cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(new):
        out = model(nxt, past_key_values=cache, use_cache=True)
        if first is None:
            first = out.logits[:, -1].float()
        cache, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
    sync()
    return time.perf_counter() - t0, first


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--intermediate", type=int, default=14336)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--cpu-smoke", action="store_true")
    p.add_argument("--no-graph", dest="graph", action="store_false",
                   help="skip the CUDA-graph table (a step's GPU time)")
    p.add_argument("--compile", action="store_true",
                   help="the graph table also times hf and ours with the step compiled whole")
    p.add_argument("--fused-residual", action="store_true",
                   help="EXPERIMENT: also ours with the residual adds folded in (fuse_residuals)")
    p.add_argument("--name", default="bench_decode")
    args = p.parse_args(argv)
    dev = harness.bench_device(args.cpu_smoke, "bench_decode")
    if dev is None:
        return 0
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    if dev == "cpu":
        args.hidden, args.intermediate, args.layers, args.vocab = 256, 768, 2, 512
        args.batch, args.prompt, args.new = [1, 2], 8, 4
    logging.getLogger("kernels").setLevel(logging.ERROR)  # unmapped layers are expected
    harness.load_kernel()  # sets LOCAL_KERNELS / offline mode

    base = build_model(args, dev, dtype)
    variants = {"hf": base, "ours": kernelize_ours(copy.deepcopy(base), dev)}
    if args.fused_residual:
        variants["ours+res"] = fuse_residuals(kernelize_ours(copy.deepcopy(base), dev), harness.load_kernel())
    if dev == "cuda":
        try:
            variants["liger"] = apply_liger(copy.deepcopy(base))
        except Exception as e:  # noqa: BLE001 - a missing or incompatible Liger drops the column
            print(f"liger: unavailable ({type(e).__name__}: {e})")

    rows = []
    for batch in args.batch:
        ids = torch.randint(0, args.vocab, (batch, args.prompt), device=dev)
        times, ref = {}, None
        for name, model in variants.items():
            decode(model, ids, min(4, args.new))  # warm-up: allocator, kernel loading, autotuning
            seconds, first = decode(model, ids, args.new)
            times[name] = seconds
            if name == "hf":
                ref = first
            else:
                err = ((first - ref).norm() / ref.norm()).item()
                print(f"  batch {batch}: {name} first-step logits vs hf, relative error {err:.2e}")
        tps = {k: batch * args.new / v for k, v in times.items()}
        row = [batch] + [f"{tps[k]:.1f}" for k in variants] + [f"{times[k] / args.new * 1e3:.2f}" for k in variants]
        row += [f"{tps['ours'] / tps[k]:.2f}x" for k in variants if k != "ours"]
        rows.append(row)
    names = list(variants)
    headers = (["batch"] + [f"{k} tok/s" for k in names] + [f"{k} ms/step" for k in names]
               + [f"ours/{k}" for k in names if k != "ours"])
    md = harness.out_dir() / f"{args.name}.md"
    md.write_text(f"# decode, hidden {args.hidden}, {args.layers} layers, {str(dtype)[6:]}, "
                  f"prompt {args.prompt}, {args.new} new tokens\n")
    harness.print_table(headers, rows, "decode throughput (greedy, KV cache, eager)", md)
    if args.graph:
        graph_table(args, variants, dev, dtype, md)
    print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
