"""GGUF Q4_K / Q6_K mat-vec (q4k_gemv, q6k_gemv): ours vs cuBLAS and vs
dequantise-then-matmul, on Llama-3-8B shapes, and the decode tokens/s they imply.

For each format and weight shape (N, K) and M = 1..8 rows of x (bf16; fp16 with --dtype fp16):
  * ours: the fused gemv on the quantised bytes (4.5 bits/weight Q4_K, 6.5625 Q6_K);
  * cuBLAS: x @ W.T with the dequantised weight in x's dtype (what an unquantised
    model runs);
  * dequant+mm (M = 1 only): quant.dequantize in plain torch on the GPU, cast to x's dtype,
    then the matmul (what a framework without a fused kernel does each step).
  * tiled no PDL: the tiled gemv with IK_PDL=0, each launch waiting for the one before to
    end (by default each gemv is a programmatic dependent of the one before: launch.cuh).
Every implementation is checked against an fp64 product first. Times: medians of
CUDA-graph replays over rotating weight copies (at least 8, and > 200 MB in all, so
no call finds its weight in the 60 MB L2), harness.time_us. GB/s counts the quantised
weight bytes only (x and out are < 0.2% of them); "% BW" is the measured device copy
bandwidth's share: 100% = the weight read at copy speed.

Then the decode model: a Llama-3-8B in Q4_K_M (32 layers of q, k, v, o, gate, up,
down; Q6_K for v and down on llama.cpp's "more bits" layers, quant.use_more_bits; the
Q6_K output head) needs these gemvs per token; their M = 1 times give the tokens/s of
the linear layers alone (attention, norms and sampling excluded: an upper bound).

    python benchmarks/bench_q4k.py            # on the GPU; --quick: M = 1, 4, 8
    python benchmarks/bench_q4k.py --formats Q4_K --shapes 14336x2048,14336x4096 --ms 1
    python benchmarks/bench_q4k.py --cpu-smoke
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

BLOCK_BYTES = {"Q4_K": 144, "Q6_K": 210}
GEMV = {"Q4_K": "q4k_gemv", "Q6_K": "q6k_gemv"}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Llama-3-8B: hidden 4096, 8 KV heads of 128 (k/v: 1024), MLP 14336, vocab 128256.
HIDDEN, KV, MLP, VOCAB, LAYERS = 4096, 1024, 14336, 128256, 32
LAYER_SHAPES = {"q": (HIDDEN, HIDDEN), "k": (KV, HIDDEN), "v": (KV, HIDDEN), "o": (HIDDEN, HIDDEN),
                "gate": (MLP, HIDDEN), "up": (MLP, HIDDEN), "down": (HIDDEN, MLP)}
SHAPES = {
    "Q4_K": [(4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096), (1024, 4096)],
    "Q6_K": [(1024, 4096), (4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096)],
}
# From ../shared/anchors.md (origin documents; other hardware, not measured here).
LLAMA_CPP = "llama.cpp Q4_K_M 8B (anchors.md): 40-70+ tok/s on laptop GPUs, 15-25 tok/s on phones"


def random_q(n, k, fmt, device, gen=None):
    """Random blocks with finite fp16 factors: valid weights for timing and checking."""
    nb = k // 256
    q = torch.randint(0, 256, (n, nb, BLOCK_BYTES[fmt]), dtype=torch.uint8, device=device, generator=gen)
    d = (torch.rand(n, nb, 1, device=device, generator=gen) * 2e-3 + 1e-4).half().view(torch.uint8)
    if fmt == "Q4_K":
        q[..., 0:2] = d
        q[..., 2:4] = (torch.rand(n, nb, 1, device=device, generator=gen) * 2e-3).half().view(torch.uint8)
    else:
        q[..., 208:210] = d
    return q.reshape(n, nb * BLOCK_BYTES[fmt])


def bench_shape(ik, fmt, n, k, ms, dev, bw, log, dtype=torch.bfloat16, ours_only=False):
    qbytes = n * k // 256 * BLOCK_BYTES[fmt]
    copies = max(8, harness.rotations_for(qbytes))
    qs = [random_q(n, k, fmt, dev) for _ in range(copies)]
    # The same copies in the tiled layout (tile_q4k / tile_q6k), which CUDA reads natively.
    tile = ik.tile_q4k if fmt == "Q4_K" else ik.tile_q6k
    qts = [tile(q) for q in qs] if dev == "cuda" else None
    wd = ik.quant.dequantize(qs[0], fmt).double()  # the reference weight (copy 0)
    w16 = wd.to(dtype)  # cuBLAS's weight: one dequantisation, copied
    bf_copies = 1 if ours_only else max(8, harness.rotations_for(w16.numel() * 2))
    ws = [w16] + [w16.clone() for _ in range(bf_copies - 1)]
    op = getattr(ik.ops, GEMV[fmt])
    rows = []
    for m in ms:
        x = torch.randn(m, k, device=dev).to(dtype)
        out = torch.empty(m, n, device=dev, dtype=dtype)
        ref = x.double() @ wd.T
        impls = {
            "ours": lambda i: op(out, x, qs[i % copies]),
            **({"ours tiled": lambda i: op(out, x, qts[i % copies]),
                "tiled no PDL": harness.without_pdl(lambda i: op(out, x, qts[i % copies]))} if qts else {}),
            "cuBLAS": lambda i: torch.matmul(x, ws[i % bf_copies].T),
        }
        if ours_only:
            del impls["cuBLAS"]
        elif m == 1:
            impls["dequant+mm"] = lambda i: torch.matmul(
                x, ik.quant.dequantize(qs[i % copies], fmt).to(dtype).T)
        errs = {}
        for name, f in impls.items():
            try:
                y = f(0)
                y = out if y is None else y
                errs[name] = harness.rel_err(y, ref)
            except Exception as e:  # noqa: BLE001
                errs[name] = None
                log["errors"].append(f"{fmt} {n}x{k} m={m} {name}: {type(e).__name__}: {e}")
        times = {}
        for name, f in impls.items():
            n_rot = copies if name != "cuBLAS" else bf_copies  # the tiled ones: copies too
            times[name] = (None if errs[name] is None or errs[name] > 2e-2
                           else harness.measure(f"{fmt} {n}x{k} m={m} {name}", f, n_rot, dev, log))
        t = times["ours"]
        floor_us = qbytes / bw * 1e6
        gbs = qbytes / (t.us * 1e-6) / 1e9 if t else None
        row = {"fmt": fmt, "n": n, "k": k, "m": m, "weight_bytes": qbytes, "copies": copies,
               "floor_us": floor_us, "rel_err": errs,
               "us": {name: (tt.us if tt else None) for name, tt in times.items()},
               "method": {name: (tt.method if tt else None) for name, tt in times.items()},
               "gb_s": gbs, "pct_bw": 100 * floor_us / t.us if t else None}
        rows.append(row)
        print(f"  {fmt} {n:>6}x{k:<5} m={m}: " + "  ".join(
            f"{name} {harness.fmt_us(tt)} us" for name, tt in times.items())
            + f"  ({harness.err_summary(errs, 2e-2)})", flush=True)
    del qs, qts, ws, w16, wd
    if dev == "cuda":
        torch.cuda.empty_cache()
    return rows


def table(rows, fmt, md, dname="bf16"):
    headers = ["N x K", "M", "copies", "ours us", "GB/s", "% BW", "tiled us", "tiled % BW", "tiled no PDL us",
               f"cuBLAS {dname} us", f"{dname}/ours", f"{dname}/tiled", "dequant+mm us", "floor us"]
    body = []
    for r in rows:
        if r["fmt"] != fmt:
            continue
        us = r["us"]
        tl = us.get("ours tiled")
        body.append([f"{r['n']}x{r['k']}", r["m"], r["copies"], us["ours"], r["gb_s"],
                     f"{r['pct_bw']:.0f}%" if r["pct_bw"] else None, tl,
                     f"{100 * r['floor_us'] / tl:.0f}%" if tl else None, us.get("tiled no PDL"), us.get("cuBLAS"),
                     f"{us['cuBLAS'] / us['ours']:.2f}x" if us["ours"] and us.get("cuBLAS") else None,
                     f"{us['cuBLAS'] / tl:.2f}x" if tl and us.get("cuBLAS") else None,
                     us.get("dequant+mm"), r["floor_us"]])
    bits = 8 * BLOCK_BYTES[fmt] / 256
    harness.print_table(headers, body, f"{fmt} gemv ({bits:g} bits/weight), x {dname}", md)


def decode_model(ik, rows, bw, md, dname="bf16"):
    """Tokens/s of the linear layers of a Q4_K_M Llama-3-8B at M = 1, from the table."""
    t = {(r["fmt"], r["n"], r["k"]): r["us"] for r in rows if r["m"] == 1}

    def us(fmt, shape, impl="ours"):
        v = t.get((fmt, *shape), {}).get(impl)
        return v

    # "ours tiled": every weight in the tiled layout
    total = {"ours": 0.0, "ours tiled": 0.0, "tiled no PDL": 0.0, "cuBLAS": 0.0}
    qbytes = 0
    missing = []
    for i in range(LAYERS):
        more = ik.quant.use_more_bits(i, LAYERS)
        for name, shape in LAYER_SHAPES.items():
            fmt = "Q6_K" if more and name in ("v", "down") else "Q4_K"
            qbytes += shape[0] * shape[1] // 256 * BLOCK_BYTES[fmt]
            for impl in total:
                v = us(fmt, shape, impl)
                if v is None:
                    missing.append(f"{fmt} {shape} {impl}")
                else:
                    total[impl] += v
    head = (VOCAB, HIDDEN)
    qbytes += VOCAB * HIDDEN // 256 * BLOCK_BYTES["Q6_K"]
    for impl in total:
        v = us("Q6_K", head, impl)
        if v is None:
            missing.append(f"Q6_K {head} {impl}")
        else:
            total[impl] += v
    more_layers = sum(ik.quant.use_more_bits(i, LAYERS) for i in range(LAYERS))
    roof_us = qbytes / bw * 1e6
    lines = [
        f"Q4_K_M Llama-3-8B, linear layers only, M = 1 ({more_layers} of {LAYERS} layers with Q6_K "
        f"v/down, Q6_K head): {qbytes / 1e9:.2f} GB of weights per token",
        f"  ours (q4k_gemv/q6k_gemv): {total['ours']:.0f} us/token -> {1e6 / total['ours']:.0f} tok/s"
        if total["ours"] else "  ours: -",
        f"  ours, tiled (tile_q4k / tile_q6k): {total['ours tiled']:.0f} us/token -> "
        f"{1e6 / total['ours tiled']:.0f} tok/s" if total["ours tiled"] else "  ours, tiled: -",
        f"  ours, tiled, every launch plain (IK_PDL=0): {total['tiled no PDL']:.0f} us/token -> "
        f"{1e6 / total['tiled no PDL']:.0f} tok/s" if total["tiled no PDL"] else "  ours, tiled, plain: -",
        f"  cuBLAS {dname} (unquantised weights, same shapes): {total['cuBLAS']:.0f} us/token -> "
        f"{1e6 / total['cuBLAS']:.0f} tok/s" if total["cuBLAS"] else f"  cuBLAS {dname}: -",
        f"  roofline at the measured copy bandwidth ({bw / 1e12:.2f} TB/s): {roof_us:.0f} us -> "
        f"{1e6 / roof_us:.0f} tok/s",
        f"  {LLAMA_CPP}",
    ]
    if missing:
        lines.append(f"  (missing timings, left out of the sums: {', '.join(sorted(set(missing)))})")
    print("\n" + "\n".join(lines))
    with open(md, "a") as f:
        f.write("\n### Decode tokens/s (linear layers)\n\n" + "\n".join(f"- {ln.strip()}" for ln in lines) + "\n")
    return {"weight_bytes_per_token": qbytes, "us_per_token": total, "roofline_us": roof_us,
            "tok_s": {k: (1e6 / v if v else None) for k, v in total.items()},
            "roofline_tok_s": 1e6 / roof_us, "llama_cpp": LLAMA_CPP, "missing": sorted(set(missing))}


def main(argv=None) -> int:
    p = harness.bench_parser(__doc__, "bench_q4k")
    p.add_argument("--formats", nargs="+", choices=sorted(SHAPES), default=sorted(SHAPES),
                   help="which formats to time (default: both)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="x and out (default bf16)")
    p.add_argument("--ours-only", action="store_true", help="time our gemv alone (A/B runs)")
    p.add_argument("--shapes", help="weights N x K instead of the Llama ones, e.g. 14336x2048,14336x4096")
    p.add_argument("--ms", help="activation rows instead of 1..8 (--quick: 1, 4, 8), e.g. 1,2")
    args = p.parse_args(argv)
    dev = harness.bench_device(args.cpu_smoke, "bench_q4k")
    if dev is None:
        return 0
    ms = [1, 4, 8] if args.quick else list(range(1, 9))
    if args.ms:
        ms = [int(m) for m in args.ms.split(",")]
    shapes = {f: SHAPES[f] for f in args.formats}
    if args.shapes:
        shapes = {f: [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] for f in args.formats}
    if dev == "cpu":
        ms = [1, 2]
        shapes = {f: [(64, 512)] for f in args.formats}
    ik = harness.load_kernel()
    torch.manual_seed(0)
    bw = harness.copy_bandwidth(device=dev)
    print(f"device copy bandwidth (read + write): {bw / 1e12:.3f} TB/s")
    md = harness.out_dir() / f"{args.name}.md"
    md.write_text(f"# {args.name}\n\nCopy bandwidth {bw / 1e12:.3f} TB/s; x {args.dtype}; medians of "
                  "CUDA-graph replays over rotating weight copies.\n")
    log = {"errors": [], "notes": []}
    rows = []
    for fmt, lst in shapes.items():
        for n, k in lst:
            rows += bench_shape(ik, fmt, n, k, ms, dev, bw, log, DTYPES[args.dtype], args.ours_only)
    for fmt in shapes:
        table(rows, fmt, md, args.dtype)
    # The tokens/s model needs every Llama shape at M = 1: not from --shapes.
    model = decode_model(ik, rows, bw, md, args.dtype) if dev == "cuda" and not args.shapes and 1 in ms else None
    for e in log["errors"]:
        print("error:", e)
    (harness.out_dir() / f"{args.name}.json").write_text(json.dumps(
        {"copy_bw": bw, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
         "rows": rows, "model": model, **log}, indent=1))
    print(f"\nwrote {md} and {args.name}.json")
    bad = [r for r in rows if r["rel_err"].get("ours") is None or r["rel_err"]["ours"] > 2e-2]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
