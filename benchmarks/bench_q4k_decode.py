"""End-to-end decode of a Llama-shaped model with Q4_K_M weights: one decode step (batch
1) with transformers' StaticCache, captured in a CUDA graph and timed as replays, so the
figure is the GPU's time a token, not Python's.

A randomly initialised LlamaForCausalLM (Llama-3-8B's shapes, `--layers` of its 32; the
full 128256-row head), every variant on the same weights:
  unquantised  transformers as it is (bf16 on the GPU), cuBLAS on the weights;
  q4km         quantize_model_q4_k_m(model, tile=True): our Q4_K / Q6_K gemvs;
  stacked      the same bytes with q/k/v and gate/up stacked (quant.fuse_q4k, what
               quantize_model_q4_k_m(..., fuse=True) does);
  stacked+k    the stacked model kernelized with our RMSNorm and LlamaMLP layers.
Attention is transformers' sdpa over a static cache of `--prompt` + `--new` slots (every
replay decodes the same position). Each variant's step logits are compared with q4km's
(the quantised variants) and, as a cosine similarity, with the unquantised model's. If
the capture fails the step is timed eagerly and the table says so (harness.time_us).
Floor: the quantised weight bytes a token reads, at the measured copy bandwidth.

    python benchmarks/bench_q4k_decode.py --layers 8      # on the GPU
    python benchmarks/bench_q4k_decode.py --cpu-smoke
"""

from __future__ import annotations

import copy
import json
import logging
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from bench_decode import build_model, kernelize_ours  # noqa: E402


def stack(ik, model):
    for _, parent in list(model.named_modules()):
        for names in ik.quant.FUSE_GROUPS:
            ik.quant.fuse_q4k(parent, names)
    return model


@torch.no_grad()
def time_step(model, ids, max_len):
    """Prefill `ids`, then time one decode step (harness.time_us: a CUDA graph of 8 steps,
    replayed); returns (Timing, the step's logits)."""
    from transformers import StaticCache

    dev = ids.device
    cache = StaticCache(config=model.config, max_cache_len=max_len)
    out = model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(ids.shape[1], device=dev),
                use_cache=True)
    nxt = out.logits[:, -1:].argmax(-1)
    pos = torch.tensor([ids.shape[1]], device=dev)

    def step():
        # Every call decodes position `prompt` again: the static layers' write position
        # (a device tensor each advances in place) is reset first, inside the graph too.
        for layer in cache.layers:
            layer.cumulative_length.fill_(ids.shape[1])
        return model(input_ids=nxt, past_key_values=cache, cache_position=pos, use_cache=True).logits

    logits = step().float()
    return harness.time_us(lambda i: step(), 1, device=dev, min_calls=8, trials=7), logits


def main(argv=None) -> int:
    p = harness.bench_parser(__doc__, "bench_q4k_decode")
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--intermediate", type=int, default=14336)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=8, help="cache slots past the prompt")
    args = p.parse_args(argv)
    dev = harness.bench_device(args.cpu_smoke, "bench_q4k_decode")
    if dev is None:
        return 0
    if dev == "cpu":
        args.hidden, args.intermediate, args.layers, args.vocab, args.prompt = 512, 1024, 2, 512, 8
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    logging.getLogger("kernels").setLevel(logging.ERROR)  # unmapped layers are expected
    ik = harness.load_kernel()
    bw = harness.copy_bandwidth(device=dev)

    base = build_model(args, dev, dtype)
    q4km = copy.deepcopy(base)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tiled weights off CUDA say they are untiled per call
        report = ik.quant.quantize_model_q4_k_m(q4km, tile=(dev == "cuda"))
    qbytes = sum(m.qweight.numel() for m in q4km.modules() if isinstance(m, ik.quant.Q4KLinear))
    variants = {"unquantised": base, "q4km": q4km, "stacked": stack(ik, copy.deepcopy(q4km))}
    variants["stacked+k"] = kernelize_ours(copy.deepcopy(variants["stacked"]), dev)

    ids = torch.randint(0, args.vocab, (1, args.prompt), device=dev)
    rows, log = [], {"errors": []}
    ref = None
    for name, model in variants.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t, logits = time_step(model, ids, args.prompt + args.new)
        if name == "q4km":
            ref = logits
        how = t.method + (f" ({t.note})" if t.note else "")
        rows.append({"variant": name, "us": t.us, "how": how, "logits": logits})
        print(f"  {name}: {t.us:.1f} us a token ({how})", flush=True)
    plain = rows[0]["logits"]
    for r in rows:
        logits = r.pop("logits")
        r["cos_unquantised"] = torch.nn.functional.cosine_similarity(logits.flatten(), plain.flatten(),
                                                                     dim=0).item()
        if r["variant"] != "unquantised":
            r["rel_err_q4km"] = ((logits - ref).norm() / ref.norm()).item()
            if r["rel_err_q4km"] > 1e-2:
                log["errors"].append(f"{r['variant']}: logits {r['rel_err_q4km']:.2e} from q4km's")
    floor_us = qbytes / bw * 1e6
    md = harness.out_dir() / f"{args.name}.md"
    md.write_text(f"# {args.name}\n\nLlama shapes hidden {args.hidden}, MLP {args.intermediate}, "
                  f"{args.layers} layers, vocab {args.vocab}; {str(dtype)[6:]} activations; prompt "
                  f"{args.prompt}; copy bandwidth {bw / 1e12:.3f} TB/s; {qbytes / 1e9:.3f} GB of "
                  f"quantised weights a token (floor {floor_us:.1f} us).\n")
    body = [[r["variant"], r["us"], f"{1e6 / r['us']:.0f}", f"{rows[0]['us'] / r['us']:.2f}x",
             f"{100 * floor_us / r['us']:.0f}%" if r["variant"] != "unquantised" else None,
             f"{r['cos_unquantised']:.4f}",
             f"{r.get('rel_err_q4km', 0):.1e}" if r["variant"] != "unquantised" else None,
             r["how"]] for r in rows]
    harness.print_table(["variant", "us a token", "tok/s", "vs unquantised", "% floor", "cos to unquantised",
                         "rel. err. to q4km", "timed as"], body, "decode step, batch 1", md)
    (harness.out_dir() / f"{args.name}.json").write_text(json.dumps(
        {"args": vars(args), "copy_bw": bw, "quantised_bytes": qbytes, "floor_us": floor_us, "rows": rows,
         "report": report, **log}, indent=1))
    for e in log["errors"]:
        print("error:", e)
    return 1 if log["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
