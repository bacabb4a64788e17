"""SwiGLU: ours vs eager, torch.compile and Liger, side by side on the same inputs.

Two tables, the shapes of the fused-kernels issue:
  * silu_and_mul_fp8: gate_up [rows, 13312] fp16 -> fp8 [rows, 6656] (the MI300 blog's
    shape), against the same function in eager torch and under torch.compile: `compile`
    is handed 1 / scale ready-made (one multiply an element, no reciprocal), and
    `compile_scale` takes the scale tensor as our op does and forms 1 / scale itself;
  * silu_mul: gate, up [rows, 14336] bf16 (Llama-3-8B's MLP), against eager
    F.silu(g) * u, its torch.compile, and Liger's LigerSiLUMulFunction.
Every implementation is checked against fp64 first. Times are medians of CUDA-graph
replays over rotating input copies (harness.time_us); `floor` = inputs read once and
outputs written once at the measured copy bandwidth.

    python benchmarks/bench_swiglu.py          # on the GPU; --quick for 4 points
    python benchmarks/bench_swiglu.py --cpu-smoke
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

FP8, FP8_MAX = torch.float8_e4m3fn, 448.0


def silu_and_mul_fp8_eager(x, inv_scale):
    d = x.shape[-1] // 2
    y = F.silu(x[..., :d]) * x[..., d:]
    return (y.float() * inv_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def silu_mul_eager(g, u):
    return F.silu(g) * u


def load_liger_silu_mul():
    try:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    except Exception as e:  # noqa: BLE001 - missing liger or triton: drop the column
        print(f"liger: unavailable ({type(e).__name__}: {e})")
        return None
    return lambda g, u: LigerSiLUMulFunction.apply(g, u)


def main(argv=None) -> int:
    args = harness.bench_parser(__doc__, "bench_swiglu").parse_args(argv)
    fp8_rows, mul_rows = [1, 8, 32, 128, 512, 2048], [1, 128, 1024, 4096]
    d_fp8, d_mul = 6656, 14336
    dev = harness.bench_device(args.cpu_smoke, "bench_swiglu")
    if dev is None:
        return 0
    if dev == "cpu":
        d_fp8, d_mul, fp8_rows, mul_rows = 128, 128, [1, 4], [1, 4]
    if args.quick:
        fp8_rows, mul_rows = [1, 8, 2048], [4096]
    k = harness.load_kernel()
    torch._dynamo.config.cache_size_limit = 64
    bw = harness.copy_bandwidth(device=dev)
    print(f"copy bandwidth (read+write): {bw / 1e9:.0f} GB/s")
    md = harness.out_dir() / f"{args.name}.md"
    md.write_text(f"# SwiGLU\n\ncopy bandwidth {bw / 1e9:.0f} GB/s\n")
    results = []

    scale = torch.tensor([0.02], device=dev)
    inv = 1.0 / scale
    impls = {
        "ours": lambda x: k.silu_and_mul_fp8(x, scale),
        "eager": lambda x: silu_and_mul_fp8_eager(x, inv),
        "compile": torch.compile(lambda x: silu_and_mul_fp8_eager(x, inv), dynamic=False),
        "compile_scale": torch.compile(lambda x: silu_and_mul_fp8_eager(x, 1.0 / scale), dynamic=False),
    }
    impls = harness.with_no_pdl(impls, dev)
    table = []
    for n in fp8_rows:
        x = torch.randn(n, 2 * d_fp8, device=dev, dtype=torch.float16)
        g, u = x[:, :d_fp8].double(), x[:, d_fp8:].double()
        ref = g * torch.sigmoid(g) * u
        errs = {name: harness.rel_err(f(x).double() * scale.item(), ref) for name, f in impls.items()}
        print(f"  silu_and_mul_fp8 {n}x{2 * d_fp8} rel err vs fp64: " + harness.err_summary(errs, 0.07))
        nbytes = n * 2 * d_fp8 * 2 + n * d_fp8
        n_rot = harness.rotations_for(n * 2 * d_fp8 * 2)
        xs = [x.clone() for _ in range(n_rot)]
        table.append(harness.time_point("silu_and_mul_fp8", impls, errs, lambda f, i, xs=xs: f(xs[i]),
                                        n, d_fp8, torch.float16, nbytes, n_rot, bw, dev, results))
        del xs
    harness.print_table(harness.table_headers(list(impls)), table,
                        f"silu_and_mul_fp8, gate_up {2 * d_fp8} fp16 -> fp8 {d_fp8}", md)

    impls = {"ours": lambda g, u: k.silu_mul(g, u), "eager": silu_mul_eager,
             "compile": torch.compile(silu_mul_eager, dynamic=False)}
    liger = load_liger_silu_mul() if dev == "cuda" else None
    if liger:
        impls["liger"] = liger
    impls = harness.with_no_pdl(impls, dev)
    table = []
    for n in mul_rows:
        g = torch.randn(n, d_mul, device=dev, dtype=torch.bfloat16)
        u = torch.randn(n, d_mul, device=dev, dtype=torch.bfloat16)
        ref = g.double() * torch.sigmoid(g.double()) * u.double()
        errs = {name: harness.rel_err(f(g, u), ref) for name, f in impls.items()}
        print(f"  silu_mul {n}x{d_mul} rel err vs fp64: " + harness.err_summary(errs, 2e-2))
        nbytes = 3 * n * d_mul * 2
        n_rot = harness.rotations_for(2 * n * d_mul * 2)
        gs = [g.clone() for _ in range(n_rot)]
        us = [u.clone() for _ in range(n_rot)]
        table.append(harness.time_point("silu_mul", impls, errs,
                                        lambda f, i, gs=gs, us=us: f(gs[i], us[i]),
                                        n, d_mul, torch.bfloat16, nbytes, n_rot, bw, dev, results))
        del gs, us
    harness.print_table(harness.table_headers(list(impls)), table, f"silu_mul, {d_mul} bf16", md)
    print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
