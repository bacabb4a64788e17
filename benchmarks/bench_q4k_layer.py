"""One decode layer of a Q4_K Llama-3-8B (M = 1) as the chain of kernels it launches, and
where its time goes.

bench_q4k.py times each gemv against copies of itself. Here the seven gemvs run in a
layer's order with the kernels a layer has between them:

    residual copy, rms_norm, q, k, v, (attention: a torch multiply stands in), o,
    fused_add_rms_norm, gate, up, silu_and_mul, down

and the chain is timed whole, its gemvs alone (the same seven, in order) and the rest
alone; then the same with fused projections, as vLLM stores them (and each group alone,
separate and fused): q, k and v one weight (6144 rows), gate and up another (28672), so
four gemvs where there were seven (the concatenated weights' bytes are the same).
Every gemv reads our tiled Q4_K (tile_q4k; ggml's rows on the CPU); the layer's weights
rotate over copies (> 200 MB in all), as in bench_q4k.py; harness.time_us (CUDA-graph
replays). The floor is the quantised weight bytes (the layer's, or a group's) at the
measured copy bandwidth (the activations, < 0.2 MB, are left out). On CUDA each part is
also timed with every kernel launched plainly ("no PDL", IK_PDL=0), in the same process.
Each gemv's output of one eager run of each form is checked against an fp64 product of
its own input and the dequantised weight first.

The copies are enough for the smallest group timed alone (q + k + v, 14 MB: 15 copies,
about 3 GB with the fused weights): with the layer's two copies (> 200 MB for the layer), that
group's 28 MB stayed in the 50 MB L2 between replays, and its rows were L2-hot (until the
fifty-first session).

    python benchmarks/bench_q4k_layer.py            # on the GPU; --dtype fp16
    python benchmarks/bench_q4k_layer.py --cpu-smoke
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from bench_q4k import BLOCK_BYTES, DTYPES, HIDDEN, KV, MLP, random_q  # noqa: E402

FUSED = {"qkv": ("q", "k", "v"), "gate_up": ("gate", "up")}


def shapes(hidden, kv, mlp):
    return {"q": (hidden, hidden), "k": (kv, hidden), "v": (kv, hidden), "o": (hidden, hidden),
            "gate": (mlp, hidden), "up": (mlp, hidden), "down": (hidden, mlp)}


def main(argv=None) -> int:
    p = harness.bench_parser(__doc__, "bench_q4k_layer")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="activations (default bf16)")
    args = p.parse_args(argv)
    dev = harness.bench_device(args.cpu_smoke, "bench_q4k_layer")
    if dev is None:
        return 0
    ik = harness.load_kernel()
    dtype = DTYPES[args.dtype]
    hidden, kv, mlp = (HIDDEN, KV, MLP) if dev == "cuda" else (512, 256, 1024)
    shp = shapes(hidden, kv, mlp)
    torch.manual_seed(0)
    bw = harness.copy_bandwidth(device=dev)
    layer_bytes = sum(n * k // 256 * BLOCK_BYTES["Q4_K"] for n, k in shp.values())
    group_bytes = min(sum(shp[p][0] * shp[p][1] // 256 * BLOCK_BYTES["Q4_K"] for p in parts)
                      for parts in FUSED.values())
    copies = max(2, harness.rotations_for(group_bytes)) if dev == "cuda" else 2
    tile = ik.tile_q4k if dev == "cuda" else (lambda q: q)  # the CPU kernel reads rows
    rows0 = {name: random_q(n, k, "Q4_K", dev) for name, (n, k) in shp.items()}
    layers = [{name: tile(q) for name, q in rows0.items()}]
    layers += [{name: tile(random_q(n, k, "Q4_K", dev)) for name, (n, k) in shp.items()}
               for _ in range(copies - 1)]
    # The fused projections: q, k, v one weight, gate and up another (N a multiple of the
    # tile's 16 rows, so tiles and rows both concatenate along dim 0).
    for w in layers:
        for name, parts in FUSED.items():
            w[name] = torch.cat([w[p] for p in parts])
    rows0.update({name: torch.cat([rows0[p] for p in parts]) for name, parts in FUSED.items()})
    # Small norm weights keep the chain's values finite: the random blocks' weights have a
    # mean (about 0.23), so sums grow with K; at 1e-2 for both, down overflowed fp16.
    w1 = (torch.rand(hidden, device=dev) * 1e-2).to(dtype)
    w2 = (torch.rand(hidden, device=dev) * 1e-3).to(dtype)
    res0 = torch.randn(1, hidden, device=dev).to(dtype)
    res, h, a = (torch.empty(1, hidden, device=dev, dtype=dtype) for _ in range(3))
    qkv = torch.empty(1, hidden + 2 * kv, device=dev, dtype=dtype)
    gu = torch.empty(1, 2 * mlp, device=dev, dtype=dtype)
    s = torch.empty(1, mlp, device=dev, dtype=dtype)
    # One set of outputs for both forms: the separate gemvs write views of the fused ones'.
    out = {"q": qkv[:, :hidden], "k": qkv[:, hidden:hidden + kv], "v": qkv[:, hidden + kv:], "qkv": qkv,
           "o": torch.empty(1, hidden, device=dev, dtype=dtype), "gate": gu[:, :mlp], "up": gu[:, mlp:],
           "gate_up": gu, "down": torch.empty(1, hidden, device=dev, dtype=dtype)}
    inp = {"q": h, "k": h, "v": h, "qkv": h, "o": a, "gate": out["o"], "up": out["o"], "gate_up": out["o"],
           "down": s}
    gemv = ik.ops.q4k_gemv

    def gemvs(w, names):
        for name in names:
            gemv(out[name], inp[name], w[name])

    def glue(step):
        if step == 0:
            res.copy_(res0)
            ik.rms_norm(res, w1, 1e-5, out=h)
        elif step == 1:
            torch.mul(out["q"], 0.5, out=a)
        elif step == 2:
            ik.fused_add_rms_norm(out["o"], res, w2, 1e-5)
        else:
            ik.silu_and_mul(gu, out=s)

    def layer_with(order):  # order: the gemvs, the glue step before each (or None)
        def run(i):
            w = layers[i % copies]
            for before, name in order:
                if before is not None:
                    glue(before)
                gemvs(w, (name,))
        return run

    separate = [(0, "q"), (None, "k"), (None, "v"), (1, "o"), (2, "gate"), (None, "up"), (3, "down")]
    fused = [(0, "qkv"), (1, "o"), (2, "gate_up"), (3, "down")]

    log = {"errors": [], "notes": []}
    # One eager layer of each form on copy 0, every gemv checked on the inputs it was given.
    errs = {}
    for order in (separate, fused):
        for t in (qkv, gu, out["o"], out["down"], h, a, s):
            t.fill_(float("nan"))
        inputs, outputs = {}, {}  # o is normalised in place later: keep copies
        for before, name in order:
            if before is not None:
                glue(before)
            inputs[name] = inp[name].clone()
            gemvs(layers[0], (name,))
            outputs[name] = out[name].clone()
        for _, name in order:
            ref = inputs[name].double() @ ik.quant.dequantize(rows0[name], "Q4_K").double().T
            key = name if order is separate else f"fused {name}"
            errs[key] = harness.rel_err(outputs[name], ref)
            if not errs[key] < 2e-2:
                log["errors"].append(f"{key}: relative error {errs[key]:.2e} against fp64")
    print("gemv errors against fp64: " + "  ".join(f"{k} {v:.1e}" for k, v in errs.items()))

    parts = {
        "layer": layer_with(separate),
        "layer, fused projections": layer_with(fused),
        "gemvs only": lambda i: gemvs(layers[i % copies], [name for _, name in separate]),
        "fused gemvs only": lambda i: gemvs(layers[i % copies], [name for _, name in fused]),
        "the rest only": lambda i: [glue(st) for st in range(4)],
    }
    for name, names in FUSED.items():  # which fusion saves what
        parts[" + ".join(names)] = lambda i, names=names: gemvs(layers[i % copies], names)
        parts[name] = lambda i, name=name: gemvs(layers[i % copies], (name,))
    floor_us = layer_bytes / bw * 1e6
    times = {name: harness.measure(f"layer: {name}", f, copies, dev, log) for name, f in parts.items()}
    # The same parts with every kernel launched plainly (IK_PDL=0), in this process.
    plain = ({name: harness.measure(f"layer: {name}, no PDL", harness.without_pdl(f), copies, dev, log)
              for name, f in parts.items()} if dev == "cuda" else {})
    md = harness.out_dir() / f"{args.name}.md"
    md.write_text(f"# {args.name}\n\nCopy bandwidth {bw / 1e12:.3f} TB/s; x {args.dtype}; one Q4_K "
                  f"layer ({hidden}, {kv}, {mlp}) at M = 1, {'tiled' if dev == 'cuda' else 'rows'}, "
                  f"{layer_bytes / 1e6:.1f} MB of weights, {copies} copies; medians of "
                  f"{'CUDA-graph replays' if dev == 'cuda' else 'CPU wall clock'}.\n")
    # The floor of each row's weights: the layer's, or one projection group's.
    group_bytes = {n: sum(shp[q][0] * shp[q][1] // 256 * BLOCK_BYTES["Q4_K"] for q in qs)
                   for name, qs in FUSED.items() for n in (name, " + ".join(qs))}
    floors = {name: (group_bytes[name] / bw * 1e6 if name in group_bytes else floor_us) for name in times}
    body = [[name, t.us if t else None, plain[name].us if plain.get(name) else None,
             harness.ratio(plain.get(name), t) if plain else None,
             floors[name] if name != "the rest only" else None,
             f"{100 * floors[name] / t.us:.0f}%" if t and name != "the rest only" else None]
            for name, t in times.items()]
    harness.print_table(["what", "us", "no PDL us", "no PDL/us", "its weights' floor us", "% floor"], body,
                        f"Q4_K decode layer, M = 1, x {args.dtype}", md)
    (harness.out_dir() / f"{args.name}.json").write_text(json.dumps(
        {"copy_bw": bw, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
         "dtype": args.dtype, "shapes": shp, "layer_bytes": layer_bytes, "copies": copies,
         "rel_err": errs, "us": {k: (t.us if t else None) for k, t in times.items()},
         "us_no_pdl": {k: (t.us if t else None) for k, t in plain.items()},
         "floor_us": floor_us, "floors_us": floors, **log}, indent=1))
    for e in log["errors"]:
        print("error:", e)
    return 1 if log["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
