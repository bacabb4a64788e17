"""LayerNorm: ours vs F.layer_norm, its torch.compile and a naive CUDA kernel, side by side.

Shapes: fp16 (4096, 4096), the roofline tutorials' example, then (16384, 1024),
(1024, 16384), (8192, 5120) and the decode shapes (1, 16384) and (128, 16384) (the split
rows) in fp16 and bf16, all with weight and bias. Every
implementation is checked against fp64 first. Times are medians of CUDA-graph replays
over rotating input copies (harness.time_us); `floor` = x read once, out written once,
weight and bias read once, at the measured copy bandwidth. The naive kernel (one thread
per row, uncoalesced; benchmarks/naive_layer_norm.py) is compiled at run time and shows
where the path to the roofline starts.

    python benchmarks/bench_layer_norm.py          # on the GPU; --quick for 2 points
    python benchmarks/bench_layer_norm.py --cpu-smoke
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
import naive_layer_norm  # noqa: E402

EPS = 1e-5
SHAPES = [(torch.float16, 4096, 4096)] + [
    (dt, n, d) for dt in (torch.float16, torch.bfloat16)
    for n, d in ((16384, 1024), (1024, 16384), (8192, 5120), (1, 16384), (128, 16384))]


def ref64(x, w, b):
    x64 = x.double()
    mean = x64.mean(-1, keepdim=True)
    var = (x64 - mean).pow(2).mean(-1, keepdim=True)
    return (x64 - mean) * torch.rsqrt(var + EPS) * w.double() + b.double()


def main(argv=None) -> int:
    args = harness.bench_parser(__doc__, "bench_layer_norm").parse_args(argv)
    dev = harness.bench_device(args.cpu_smoke, "bench_layer_norm")
    if dev is None:
        return 0
    shapes = SHAPES
    if dev == "cpu":
        shapes = [(torch.float16, 4, 128), (torch.bfloat16, 3, 257)]
    elif args.quick:
        shapes = SHAPES[:2]
    k = harness.load_kernel()
    torch._dynamo.config.cache_size_limit = 64
    bw = harness.copy_bandwidth(device=dev)
    print(f"copy bandwidth (read+write): {bw / 1e9:.0f} GB/s")
    out = harness.out_dir()
    md = out / f"{args.name}.md"
    md.write_text(f"# LayerNorm\n\ncopy bandwidth {bw / 1e9:.0f} GB/s\n")

    def eager(x, w, b):
        return F.layer_norm(x, x.shape[-1:], w, b, EPS)

    impls = {"ours": lambda x, w, b: k.layer_norm(x, w, b, EPS), "eager": eager,
             "compile": torch.compile(eager, dynamic=False)}
    naive = naive_layer_norm.load() if dev == "cuda" else None
    if naive:
        impls["naive"] = lambda x, w, b: naive(x, w, b, EPS)
    impls = harness.with_no_pdl(impls, dev)
    results, tables = [], {}
    for dtype, n, d in shapes:
        x = torch.randn(n, d, device=dev, dtype=dtype) + 0.5
        w = torch.randn(d, device=dev, dtype=dtype)
        b = torch.randn(d, device=dev, dtype=dtype)
        ref = ref64(x, w, b)
        errs = {}
        for name, f in impls.items():
            try:
                errs[name] = harness.rel_err(f(x, w, b), ref)
            except Exception as e:  # noqa: BLE001 - one failing column must not kill the sweep
                print(f"    {name}: failed: {type(e).__name__}: {e}")
                errs[name] = None
        print(f"  layer_norm {n}x{d} {dtype} rel err vs fp64: " + harness.err_summary(errs, 1e-2))
        esize = x.element_size()
        nbytes = 2 * n * d * esize + 2 * d * esize
        n_rot = harness.rotations_for(n * d * esize)
        xs = [x.clone() for _ in range(n_rot)]
        row = harness.time_point("layer_norm", impls, errs, lambda f, i, xs=xs: f(xs[i], w, b),
                                 n, d, dtype, nbytes, n_rot, bw, dev, results)
        tables.setdefault(dtype, []).append([d] + row)
        del xs
    headers = ["hidden"] + harness.table_headers(list(impls))
    for dtype, rows in tables.items():
        harness.print_table(headers, rows, f"layer_norm, weight and bias, {str(dtype).split('.')[-1]}", md)
    (out / f"{args.name}.json").write_text(json.dumps({"copy_bw": bw, "results": results}, indent=1))
    print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
