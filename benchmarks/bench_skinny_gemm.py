"""Skinny FP8 GEMM (decode, M <= 32): ours vs torch._scaled_mm (cuBLASLt), and a decode MLP.

Shapes (N, K), the weight [N, K] float8_e4m3fn in nn.Linear's layout:
  * the MI300 blog's: (2304, 16384), (13312, 16384), (16384, 6656);
  * Llama-3-8B: qkv (6144, 4096), o (4096, 4096), gate_up (28672, 4096), down (4096, 14336);
  * Llama-3-70B, TP8 shard: qkv (1280, 8192), o (1024, 8192), gate_up (7168, 8192),
    down (8192, 3584);
for M (activation rows, `rows` in the tables) in 1, 2, 4, 8, 16, 32, with per-tensor
scales for both (the same tensors) and a bf16 output. Each shape rotates through at
least 8 weight copies (256 MB or more in all) so that no weight is read from L2; the
activation stays L2-hot, as in a model, where the previous op just wrote it. Times are
medians of CUDA-graph replays (harness.time_us). `GB/s` is weight bytes / time; `%copy`
that against the measured device copy bandwidth (read + write); `floor` = N*K bytes at
that bandwidth. Every implementation is checked against an fp64 matmul of the
dequantised operands first (worst row's relative error).

The decode MLP block (hidden 16384, intermediate 6656, fp16 activations):
rms_norm_fp8 -> GEMM gate_up [13312, 16384] -> silu_and_mul_fp8 -> GEMM down
[16384, 6656], ours against the same chain from torch ops + torch._scaled_mm, eager and
under torch.compile.

--tune sweeps the kernel's work split [tiles_per_block, warps_per_tile, cluster,
convert] on the blog's three shapes (what the launcher's defaults should be).

--paths times the activation paths (convert 1-4 and 6) side by side on the blog's shapes (M 1,
8, 16, 24, 32; launcher's split): the default, convert 1 and 2 (fp8 activation converted in
every warp), convert 3 (f16 pre-pass + cp.async weight ring) with and without the
programmatic dependent launch of the GEMM after the pre-pass (IK_PDL=0),
convert 4 (fp8 warpgroup MMA, weight in registers), convert 6 (the same MMAs fed by the
tensor memory accelerator) and torch._scaled_mm; every output is checked against the fp64
reference first.

    python benchmarks/bench_skinny_gemm.py [--quick] [--tune] [--paths] [--out DIR]
    python benchmarks/bench_skinny_gemm.py --cpu-smoke
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

FP8, FP8_MAX = torch.float8_e4m3fn, 448.0
BLOG = [(2304, 16384), (13312, 16384), (16384, 6656)]
LLAMA8B = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]
LLAMA70B_TP8 = [(1280, 8192), (1024, 8192), (7168, 8192), (8192, 3584)]
MS = [1, 2, 4, 8, 16, 32]
LABELS = {BLOG[0]: "blog", BLOG[1]: "blog", BLOG[2]: "blog", LLAMA8B[0]: "8B qkv",
          LLAMA8B[1]: "8B o", LLAMA8B[2]: "8B gate_up", LLAMA8B[3]: "8B down",
          LLAMA70B_TP8[0]: "70B/8 qkv", LLAMA70B_TP8[1]: "70B/8 o",
          LLAMA70B_TP8[2]: "70B/8 gate_up", LLAMA70B_TP8[3]: "70B/8 down"}
TUNE_CONFIGS = [[rb, kw, nc, cvt] for cvt in (1, 2, 3) for rb, kw, nc in
                ((1, 2, 1), (1, 4, 1), (1, 8, 1), (1, 4, 2), (1, 8, 2), (1, 8, 4), (2, 2, 1),
                 (2, 4, 1), (2, 4, 2), (4, 2, 1))]


def rand_fp8(shape, device):
    return (torch.randn(shape, device=device) * 3).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def rotated_weights(n, k, dev):
    """At least 8 copies of an [n, k] fp8 weight, > 256 MB in all: no call reads its weight from L2."""
    n_rot = max(8, harness.rotations_for(n * k, target_bytes=256 << 20))
    return [rand_fp8((n, k), dev) for _ in range(n_rot)]


def each_weight(shapes, dev):
    """(n, k, rotated weight copies) per shape; the copies are freed before the next shape's."""
    for n, kk in shapes:
        ws = rotated_weights(n, kk, dev)
        yield n, kk, ws
        ws.clear()  # the caller's name for the list keeps it alive: empty it
        if dev == "cuda":
            torch.cuda.empty_cache()


def worst_row_err(y, ref) -> float:
    y = y.double()
    return ((y - ref).norm(dim=1) / ref.norm(dim=1).clamp_min(1e-30)).max().item()


# The per-tensor scales of the shape, tune and path sweeps.
SA, SB = 0.02, 0.01


def fp8_case(m, w, dev):
    """A random [m, K] fp8 activation for weight w [N, K], a bf16 output buffer, and the
    fp64 reference of the product at scales SA x SB."""
    a = rand_fp8((m, w.shape[1]), dev)
    out = torch.empty(m, w.shape[0], device=dev, dtype=torch.bfloat16)
    return a, out, (a.double() @ w.double().T) * (SA * SB)


def scaled_mm(a, b, sa, sb):
    return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)


def gemm_sweep(k, shapes, ms, bw, dev, md, results, title):
    sa = torch.tensor(SA, device=dev)
    sb = torch.tensor(SB, device=dev)
    impls = {"ours": lambda a, b: k.skinny_gemm_fp8(a, b, sa, sb),
             "_scaled_mm": lambda a, b: scaled_mm(a, b, sa, sb)}
    for n, kk, ws in each_weight(shapes, dev):
        nbytes = n * kk
        n_rot = len(ws)
        a_all = rand_fp8((max(ms), kk), dev)
        ref_all = (a_all.double() @ ws[0].double().T) * sa.item() * sb.item()
        table = []
        for m in ms:
            a = a_all[:m]
            errs = {}
            for name, f in impls.items():
                try:
                    errs[name] = worst_row_err(f(a, ws[0]), ref_all[:m])
                except Exception as e:  # noqa: BLE001 - a failing column must not kill the sweep
                    print(f"    {name} M={m} N={n} K={kk}: {type(e).__name__}: {e}")
                    errs[name] = None
            log = {"errors": [], "notes": []}
            times = {name: None if errs[name] is None else harness.measure(
                name, lambda i, f=f: f(a, ws[i]), n_rot, dev, log) for name, f in impls.items()}
            ours, ref = times["ours"], times["_scaled_mm"]
            floor_us = nbytes / bw * 1e6
            gbs = nbytes / (ours.us * 1e-6) / 1e9 if ours else None
            table.append([m, n_rot, harness.fmt_us(ours), harness.fmt_us(ref), harness.ratio(ref, ours),
                          f"{gbs:.0f}" if gbs else "-", f"{100 * gbs * 1e9 / bw:.0f}%" if gbs else "-",
                          f"{floor_us:.2f}", harness.err_summary(errs, 1e-2)])
            results.append({"op": "skinny_gemm_fp8", "label": LABELS.get((n, kk), ""), "M": m, "N": n,
                            "K": kk, "copies": n_rot, "weight_bytes": nbytes, "floor_us": floor_us,
                            "us": {name: (t.us if t else None) for name, t in times.items()},
                            "method": {name: (t.method if t else None) for name, t in times.items()},
                            "worst_row_rel_err": errs, **log})
            if dev == "cuda":
                torch.cuda.empty_cache()
        harness.print_table(["rows", "copies", "ours us", "_scaled_mm us", "_scaled_mm/ours",
                             "ours GB/s", "ours %copy", "floor us", "worst row err"], table,
                            f"{title}: N={n}, K={kk} ({LABELS.get((n, kk), '')}), bf16 out", md)


def tune_sweep(k, shapes, ms, bw, dev, md, results, configs=None):
    sa = torch.tensor([SA], device=dev)
    sb = torch.tensor([SB], device=dev)
    for n, kk, ws in each_weight(shapes, dev):
        n_rot = len(ws)
        for m in ms:
            a, out, ref = fp8_case(m, ws[0], dev)
            rows = []
            for cfg in [[]] + (configs or TUNE_CONFIGS):
                log = {"errors": [], "notes": []}
                try:
                    k.ops.skinny_gemm_fp8(out, a, ws[0], sa, sb, None, cfg)
                except RuntimeError as e:  # a config these operands cannot take
                    rows.append([str(cfg), "-", "-", str(e).splitlines()[0][:60]])
                    continue
                err = worst_row_err(out, ref)
                t = harness.measure(f"cfg {cfg}", lambda i, cfg=cfg: k.ops.skinny_gemm_fp8(
                    out, a, ws[i], sa, sb, None, cfg), n_rot, dev, log)
                rows.append([str(cfg or "auto"), harness.fmt_us(t),
                             f"{100 * n * kk / (t.us * 1e-6) / bw:.0f}%" if t else "-",
                             f"{err:.1e}" + (" FAIL" if err > 1e-2 else "")])
                results.append({"op": "skinny_gemm_fp8_tune", "M": m, "N": n, "K": kk, "config": cfg,
                                "us": t.us if t else None, "worst_row_rel_err": err, **log})
            log = {"errors": [], "notes": []}
            t = harness.measure("_scaled_mm", lambda i: scaled_mm(a, ws[i], sa, sb), n_rot, dev, log)
            rows.append(["_scaled_mm", harness.fmt_us(t),
                         f"{100 * n * kk / (t.us * 1e-6) / bw:.0f}%" if t else "-", "-"])
            results.append({"op": "skinny_gemm_fp8_tune", "M": m, "N": n, "K": kk, "config": "_scaled_mm",
                            "us": t.us if t else None, **log})
            harness.print_table(["config [rb, kw, cluster, convert]", "us", "%copy", "worst row err"],
                                rows, f"tune: M={m}, N={n}, K={kk}", md)


# name: (config, environment the launcher reads at each launch, or None)
PATHS = {"default": ([], None), "no PDL": ([], {"IK_PDL": "0"}), "all PDL": ([], {"IK_PDL": "2"}), "cvt1": ([0, 0, 0, 1], None), "cvt2": ([0, 0, 0, 2], None),
         "cvt3": ([0, 0, 0, 3], None), "cvt3 no PDL": ([0, 0, 0, 3], {"IK_PDL": "0"}),
         "cvt4": ([0, 0, 0, 4], None), "cvt6": ([0, 0, 0, 6], None),
         # convert 7 (M <= 2): rows a block (r), segments a thread in flight (v), fp32 sums
         # (automatic: persistent blocks where a row is one pass of 8-16 KB, skinny_gemm.cu)
         "cvt7": ([0, 0, 0, 7], None), "cvt7 r1": ([1, 0, 0, 7], None), "cvt7 r2": ([2, 0, 0, 7], None),
         "cvt7 r4": ([4, 0, 0, 7], None),
         "cvt7 v1": ([0, 1, 0, 7], None), "cvt7 v2": ([0, 2, 0, 7], None), "cvt7 r1 v2": ([1, 2, 0, 7], None),
         "cvt7 f32": ([0, 0, 0, 7], {"IK_SKINNY_GEMM_ROWS_F32": "1"}),
         "cvt7 r1 f32": ([1, 0, 0, 7], {"IK_SKINNY_GEMM_ROWS_F32": "1"}),
         # convert 8 (M = 1, sm_90a): weight rows a block (r), groups of 8 steps in flight (g)
         "cvt8": ([0, 0, 0, 8], None), "cvt8 r1": ([1, 0, 0, 8], None), "cvt8 r2": ([2, 0, 0, 8], None),
         "cvt8 r4": ([4, 0, 0, 8], None), "cvt8 g2": ([0, 2, 0, 8], None), "cvt8 r2 g2": ([2, 2, 0, 8], None),
         "cvt8 r4 g2": ([4, 2, 0, 8], None)}
CVT4_MAX_M = 32  # convert 4 and 6 (the fp8 warpgroup MMA) take at most 32 rows
CVT7_MAX_M = 2  # convert 7 (whole weight rows a block) takes at most 2 rows of a


def paths_sweep(k, shapes, ms, bw, dev, md, results, names=None):
    paths = {name: PATHS[name] for name in (names or PATHS)}
    sa = torch.tensor([SA], device=dev)
    sb = torch.tensor([SB], device=dev)
    for n, kk, ws in each_weight(shapes, dev):
        n_rot = len(ws)
        rows = []
        for m in ms:
            a, out, ref = fp8_case(m, ws[0], dev)
            log = {"errors": [], "notes": []}
            row = [m]
            for name, (cfg, env) in paths.items():
                if (cfg[3:] in ([4], [6]) and (m > CVT4_MAX_M or dev != "cuda")) or (cfg[3:] == [7] and m > CVT7_MAX_M) \
                        or (cfg[3:] == [8] and m != 1) \
                        or (cfg[3:] == [8] and dev != "cuda"):
                    row.append("-")
                    continue
                os.environ.update(env or {})  # read at launch (graph capture)
                try:
                    k.ops.skinny_gemm_fp8(out, a, ws[0], sa, sb, None, cfg)
                    err = worst_row_err(out, ref)
                    t = harness.measure(name, lambda i, cfg=cfg: k.ops.skinny_gemm_fp8(
                        out, a, ws[i], sa, sb, None, cfg), n_rot, dev, log) if err <= 1e-2 else None
                finally:
                    for key in env or {}:
                        os.environ.pop(key, None)
                row.append(harness.fmt_us(t) + ("" if err <= 1e-2 else f" FAIL {err:.1e}"))
                results.append({"op": "skinny_gemm_fp8_paths", "path": name, "M": m, "N": n, "K": kk,
                                "config": cfg, "us": t.us if t else None, "worst_row_rel_err": err, **log})
            t = harness.measure("_scaled_mm", lambda i: scaled_mm(a, ws[i], sa[0], sb[0]), n_rot, dev, log)
            row += [harness.fmt_us(t), f"{n * kk / bw * 1e6:.2f}"]
            results.append({"op": "skinny_gemm_fp8_paths", "path": "_scaled_mm", "M": m, "N": n, "K": kk,
                            "us": t.us if t else None, **log})
            rows.append(row)
        harness.print_table(["rows"] + [f"{p} us" for p in paths] + ["_scaled_mm us", "floor us"], rows,
                            f"activation paths: N={n}, K={kk}", md)


# ---- the decode MLP block.

def rms_norm_fp8_eager(x, w, inv_scale, eps):
    xf = x.float()
    y = w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return (y.float() * inv_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def silu_and_mul_fp8_eager(h, inv_scale):
    d = h.shape[-1] // 2
    y = F.silu(h[..., :d]) * h[..., d:]
    return (y.float() * inv_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def torch_mlp(x, w_norm, wgu, wd, s1, s2, sgu, sd, eps):
    q1 = rms_norm_fp8_eager(x, w_norm, 1.0 / s1, eps)
    h = torch._scaled_mm(q1, wgu.t(), scale_a=s1, scale_b=sgu, out_dtype=x.dtype)
    q2 = silu_and_mul_fp8_eager(h, 1.0 / s2)
    return torch._scaled_mm(q2, wd.t(), scale_a=s2, scale_b=sd, out_dtype=x.dtype)


def mlp_sweep(k, hidden, inter, ms, bw, dev, md, results):
    eps, dtype = 1e-6, torch.float16
    w_norm = (1 + 0.1 * torch.randn(hidden, device=dev)).to(dtype)
    s1 = torch.tensor(0.02, device=dev)   # activation scales (static, calibrated)
    s2 = torch.tensor(0.002, device=dev)
    sgu = torch.tensor(0.02 / 16, device=dev)  # weight scales: randn * 3 fp8 codes
    sd = torch.tensor(0.02 / 16, device=dev)
    per_copy = 2 * inter * hidden + hidden * inter
    n_rot = max(8, harness.rotations_for(per_copy, target_bytes=512 << 20))
    wgus = [rand_fp8((2 * inter, hidden), dev) for _ in range(n_rot)]
    wds = [rand_fp8((hidden, inter), dev) for _ in range(n_rot)]

    def ours(x, i):
        q1 = k.rms_norm_fp8(x, w_norm, s1.reshape(1), eps)
        h = k.skinny_gemm_fp8(q1, wgus[i], s1.reshape(1), sgu.reshape(1), out_dtype=dtype)
        q2 = k.silu_and_mul_fp8(h, s2.reshape(1))
        return k.skinny_gemm_fp8(q2, wds[i], s2.reshape(1), sd.reshape(1), out_dtype=dtype)

    compiled = torch.compile(torch_mlp, dynamic=True)  # one compile for every M
    impls = {"ours": ours, "ours no PDL": harness.without_pdl(ours),
             "torch": lambda x, i: torch_mlp(x, w_norm, wgus[i], wds[i], s1, s2, sgu, sd, eps),
             "compile": lambda x, i: compiled(x, w_norm, wgus[i], wds[i], s1, s2, sgu, sd, eps)}
    table = []
    for m in ms:
        x = torch.randn(m, hidden, device=dev, dtype=dtype)
        outs, errs = {}, {}
        for name, f in impls.items():
            try:
                outs[name] = f(x, 0).double()
            except Exception as e:  # noqa: BLE001
                print(f"    mlp {name} M={m}: {type(e).__name__}: {e}")
        base = outs.get("torch")
        for name in impls:
            errs[name] = (worst_row_err(outs[name], base) if name in outs and base is not None else None)
        log = {"errors": [], "notes": []}
        times = {name: None if name not in outs else harness.measure(
            name, lambda i, f=f: f(x, i), n_rot, dev, log) for name, f in impls.items()}
        ours_t = times["ours"]
        floor_us = per_copy / bw * 1e6
        table.append([m, n_rot] + [harness.fmt_us(times[n]) for n in impls]
                     + [harness.ratio(times["ours no PDL"], ours_t),
                        harness.ratio(times["torch"], ours_t), harness.ratio(times["compile"], ours_t),
                        f"{floor_us:.2f}", f"{100 * floor_us / ours_t.us:.0f}%" if ours_t else "-",
                        harness.err_summary(errs, 0.05)])
        results.append({"op": "decode_mlp", "M": m, "hidden": hidden, "intermediate": inter,
                        "copies": n_rot, "weight_bytes": per_copy, "floor_us": floor_us,
                        "us": {n: (t.us if t else None) for n, t in times.items()},
                        "worst_row_rel_err_vs_torch": errs, **log})
        if dev == "cuda":
            torch.cuda.empty_cache()
    harness.print_table(["rows", "copies", "ours us", "ours no PDL us", "torch us", "compile us", "no PDL/ours",
                         "torch/ours",
                         "compile/ours", "floor us", "ours %floor", "worst row err vs torch"], table,
                        f"decode MLP: rms_norm_fp8 -> gate_up [{2 * inter}, {hidden}] -> "
                        f"silu_and_mul_fp8 -> down [{hidden}, {inter}], fp16", md)
    del wgus, wds


def plot(results, bw, path) -> None:
    """Time and achieved weight bandwidth versus M, one line per shape, ours solid and
    cuBLASLt dashed (only measured points)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001 - the figure is optional
        print(f"no plot ({type(e).__name__}: {e})")
        return
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(13, 5))
    shapes = sorted({(r["N"], r["K"]) for r in results if r["op"] == "skinny_gemm_fp8"},
                    key=lambda s: -s[0] * s[1])
    for i, (n, kk) in enumerate(shapes):
        rs = [r for r in results if r["op"] == "skinny_gemm_fp8" and (r["N"], r["K"]) == (n, kk)]
        color = f"C{i % 10}"
        for impl, style in (("ours", "-"), ("_scaled_mm", "--")):
            pts = [(r["M"], r["us"][impl]) for r in rs if r["us"].get(impl)]
            if not pts:
                continue
            ms, us = zip(*pts)
            label = f"{n}x{kk}" if impl == "ours" else None
            ax_t.plot(ms, us, style, color=color, marker="o", ms=3, label=label)
            ax_b.plot(ms, [n * kk / (u * 1e-6) / 1e9 for u in us], style, color=color, marker="o", ms=3)
    for ax, ylabel in ((ax_t, "time (us)"), (ax_b, "weight GB/s")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M (activation rows)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    ax_b.axhline(bw / 1e9, color="k", lw=0.8, ls=":", label="device copy bandwidth")
    ax_b.legend(fontsize=7)
    ax_t.set_yscale("log")
    ax_t.legend(fontsize=7, title="N x K (solid ours, dashed _scaled_mm)", title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv=None) -> int:
    p = harness.bench_parser(__doc__, "bench_skinny_gemm")
    p.add_argument("--tune", action="store_true", help="sweep the work split instead")
    p.add_argument("--paths", action="store_true", help="time the activation paths instead")
    p.add_argument("--no-mlp", action="store_true")
    p.add_argument("--mlp-only", action="store_true", help="the decode MLP block alone")
    p.add_argument("--out", type=Path, default=None, help="result folder ($OUT or benchmarks/out)")
    p.add_argument("--shapes", default=None, help="NxK,NxK,...: these weights only (CUDA)")
    p.add_argument("--ms", default=None, help="M,M,...: these activation row counts only (CUDA)")
    p.add_argument("--path-names", default=None, help="name,name,...: --paths times these paths only")
    p.add_argument("--configs", default=None,
                   help="rb,kw,cluster,convert;...: --tune sweeps these configs instead of its own")
    args = p.parse_args(argv)
    dev = harness.bench_device(args.cpu_smoke, "bench_skinny_gemm")
    if dev is None:
        return 0
    shapes, ms, hidden, inter = BLOG + LLAMA8B + LLAMA70B_TP8, MS, 16384, 6656
    if dev == "cpu":
        shapes, ms, hidden, inter = [(48, 128), (32, 256)], [1, 4], 128, 64
    elif args.quick:
        shapes, ms = BLOG, [1, 8, 16, 32]
    if dev == "cuda" and args.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    if dev == "cuda" and args.ms:
        ms = [int(v) for v in args.ms.split(",")]
    out = args.out or harness.out_dir()
    out.mkdir(parents=True, exist_ok=True)
    k = harness.load_kernel()
    torch._dynamo.config.cache_size_limit = 64
    bw = harness.copy_bandwidth(device=dev)
    print(f"copy bandwidth (read+write): {bw / 1e9:.0f} GB/s")
    md = out / f"{args.name}.md"
    md.write_text(f"# Skinny FP8 GEMM\n\ncopy bandwidth {bw / 1e9:.0f} GB/s\n")
    results = []
    if args.paths:
        cuda = dev == "cuda"
        paths_sweep(k, shapes if not cuda or args.shapes else shapes[:3],
                    ms if not cuda or args.ms else [1, 8, 16, 24, 32], bw, dev, md, results,
                    args.path_names.split(",") if args.path_names else None)
    elif args.tune:
        cuda = dev == "cuda"
        configs = [[int(v) for v in c.split(",")] for c in args.configs.split(";")] if args.configs else None
        tune_sweep(k, shapes[:3] if cuda and not args.shapes else shapes,
                   [1, 8, 16, 32] if cuda and not args.ms else ms, bw, dev, md, results, configs)
    elif args.mlp_only:
        mlp_sweep(k, hidden, inter, ms, bw, dev, md, results)
    else:
        gemm_sweep(k, shapes, ms, bw, dev, md, results, "skinny_gemm_fp8 vs torch._scaled_mm")
        if not args.no_mlp:
            mlp_sweep(k, hidden, inter, ms, bw, dev, md, results)
        plot(results, bw, out / f"{args.name}.png")
    (out / f"{args.name}.json").write_text(json.dumps(
        {"copy_bandwidth": bw, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
         "torch": torch.__version__, "results": results}, indent=1))
    print(f"wrote {md} and {args.name}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
