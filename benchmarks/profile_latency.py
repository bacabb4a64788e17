"""Where the decode-size time of the norm and SwiGLU ops goes: kernels per call and their
device time, ours vs torch.compile vs Liger, under torch.profiler (CUDA activity).

At 1-8 rows our kernels trail Triton's (Liger, torch.compile) by 0.2-0.6 us in the
CUDA-graph harness, with inputs L2-resident. This script tells whether that is the
kernel's own device duration or something around it (more kernels per call, or a
larger per-node cost in the graph). For every point and implementation it prints:

  * kernels/call and their names (an op that launches two kernels shows it here);
  * the median device duration of each kernel, and their sum per call, from the
    profiler's CUDA activity records of plain (eager) calls;
  * the same for the calls replayed from one CUDA graph (the harness's condition),
    and the graph's start-to-start time per call (device duration + per-node cost);
  * harness.time_us (the benchmarks' number, no profiler) for reference.

Points (rows x hidden): rms_norm bf16 4096, fused_add_rms_norm bf16 4096, rms_norm_fp8
(static scale, with residual) fp16 16384, silu_and_mul_fp8 fp16 gate_up 13312, silu_mul
bf16 14336, layer_norm fp16 4096, at 1 and 8 rows; rms_norm bf16 4096 x 4096. Inputs
rotate over copies as in the benchmarks (harness.rotations_for).

    python benchmarks/profile_latency.py                 # on the GPU
    python benchmarks/profile_latency.py --points rms_norm:1x4096 --impls ours,liger
    python benchmarks/profile_latency.py --cpu-smoke     # CPU: checks the script (CPU ops, not kernels)
    ncu --profile-from-start off ... python benchmarks/profile_latency.py --ncu-driver \\
        --points rms_norm:1x4096 --impls ours      # 3 calls between cudaProfilerStart/Stop
Results: $OUT/profile_latency.{md,json} (or benchmarks/out/).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_norm_fp8  # noqa: E402
import bench_rms_norm  # noqa: E402
import bench_swiglu  # noqa: E402
import harness  # noqa: E402

EPS = 1e-6
HIDDEN = {"rms_norm": 4096, "fused_add_rms_norm": 4096, "rms_norm_fp8": 16384,
          "silu_and_mul_fp8": 13312, "silu_mul": 14336, "layer_norm": 4096}
DTYPE = {"rms_norm": torch.bfloat16, "fused_add_rms_norm": torch.bfloat16, "rms_norm_fp8": torch.float16,
         "silu_and_mul_fp8": torch.float16, "silu_mul": torch.bfloat16, "layer_norm": torch.float16}
DEFAULT_POINTS = [f"{op}:{n}x{d}" for op, d in HIDDEN.items() for n in (1, 8)] + ["rms_norm:4096x4096"]


def load_liger_layer_norm():
    try:
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    except Exception as e:  # noqa: BLE001 - missing liger or triton: drop the column
        print(f"liger: layer_norm unavailable ({type(e).__name__}: {e})")
        return None
    return lambda x, w, b, eps: LigerLayerNormFunction.apply(x, w, b, eps)


class Anchors:
    """torch.compile'd functions (one per op, shapes recompile) and Liger's, built once."""

    def __init__(self, dev, want):
        self.compiled = {}
        if "compile" in want:
            bench_rms_norm.allow_many_recompiles()
            self.compiled = {
                "rms_norm": torch.compile(bench_rms_norm.rms_norm_eager, dynamic=False),
                "fused_add_rms_norm": torch.compile(bench_rms_norm.fused_add_rms_norm_eager, dynamic=False),
                "rms_norm_fp8": torch.compile(
                    lambda x, r, w, inv: bench_norm_fp8.static_eager(x, r, w, inv, EPS), dynamic=False),
                "silu_and_mul_fp8": torch.compile(bench_swiglu.silu_and_mul_fp8_eager, dynamic=False),
                "silu_mul": torch.compile(bench_swiglu.silu_mul_eager, dynamic=False),
                "layer_norm": torch.compile(lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-5),
                                            dynamic=False),
            }
        self.liger = {}
        if "liger" in want and dev == "cuda":
            rms, fused = bench_rms_norm.load_liger()
            self.liger = {"rms_norm": rms, "fused_add_rms_norm": fused,
                          "silu_mul": bench_swiglu.load_liger_silu_mul(),
                          "layer_norm": load_liger_layer_norm()}
            self.liger = {k: v for k, v in self.liger.items() if v is not None}


def make_point(op, n, d, dev, k, anchors, want, n_rot):
    """{impl: fn(i)} for one point, each fn running one call on input copy i."""
    dtype = DTYPE[op]
    torch.manual_seed(0)

    def copies(shape, scale=1.0, shift=0.0):
        t = torch.randn(*shape, device=dev, dtype=dtype) * scale + shift
        return [t.clone() for _ in range(n_rot)]

    impls = {}
    comp, lig = anchors.compiled.get(op), anchors.liger.get(op)
    if op in ("rms_norm", "fused_add_rms_norm", "rms_norm_fp8", "layer_norm"):
        w = (1.0 + 0.1 * torch.randn(d, device=dev)).to(dtype)
    if op == "rms_norm":
        xs = copies((n, d))
        impls["ours"] = lambda i: k.rms_norm(xs[i], w, EPS)
        if comp:
            impls["compile"] = lambda i: comp(xs[i], w, EPS)
        if lig:
            impls["liger"] = lambda i: lig(xs[i], w, EPS)
    elif op == "fused_add_rms_norm":
        # In place for ours: the values drift over the calls; speed does not depend on them.
        xs, rs = copies((n, d)), copies((n, d))
        impls["ours"] = lambda i: k.fused_add_rms_norm(xs[i], rs[i], w, EPS)
        if comp:
            impls["compile"] = lambda i: comp(xs[i], rs[i], w, EPS)
        if lig:
            impls["liger"] = lambda i: lig(xs[i], rs[i], w, EPS)
    elif op == "rms_norm_fp8":
        xs, rs = copies((n, d)), copies((n, d))
        scale = torch.tensor([0.05], device=dev)
        inv = 1.0 / scale
        impls["ours"] = lambda i: k.rms_norm_fp8(xs[i], w, scale, EPS, residual=rs[i])
        if comp:
            impls["compile"] = lambda i: comp(xs[i], rs[i], w, inv)
    elif op == "silu_and_mul_fp8":
        xs = copies((n, d))
        scale = torch.tensor([0.02], device=dev)
        inv = 1.0 / scale
        impls["ours"] = lambda i: k.silu_and_mul_fp8(xs[i], scale)
        if comp:
            impls["compile"] = lambda i: comp(xs[i], inv)
    elif op == "silu_mul":
        gs, us = copies((n, d)), copies((n, d))
        impls["ours"] = lambda i: k.silu_mul(gs[i], us[i])
        if comp:
            impls["compile"] = lambda i: comp(gs[i], us[i])
        if lig:
            impls["liger"] = lambda i: lig(gs[i], us[i])
    elif op == "layer_norm":
        xs = copies((n, d), shift=0.5)
        b = torch.randn(d, device=dev, dtype=dtype)
        impls["ours"] = lambda i: k.layer_norm(xs[i], w, b, 1e-5)
        if comp:
            impls["compile"] = lambda i: comp(xs[i], w, b)
        if lig:
            impls["liger"] = lambda i: lig(xs[i], w, b, 1e-5)
    else:
        raise ValueError(f"unknown op {op}")
    return {name: f for name, f in impls.items() if name in want}


def point_bytes(op, n, d, es):
    """Input copy size, for the rotation count."""
    return n * d * es * (2 if op in ("fused_add_rms_norm", "rms_norm_fp8", "silu_mul") else 1)


def device_events(prof, dev):
    """(name, start_us, duration_us) of every device activity (kernels, memcpy, memset);
    on the CPU, of every top-level op instead (a smoke run has no kernels)."""
    out = []
    for e in prof.events():
        if dev == "cuda":
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue
        elif e.cpu_parent is not None or e.name.startswith(("ProfilerStep", "[")):
            continue
        out.append((e.name, e.time_range.start, e.time_range.elapsed_us()))
    out.sort(key=lambda t: t[1])
    return out


def summarise(events, calls):
    """Per kernel name: launches per call and median duration; total device us per call;
    median start-to-start time per call (one call = len(events)/calls activities).
    None when the profiler saw no activity (e.g. no graph kernel records)."""
    if not events:
        return None
    by_name = defaultdict(list)
    for name, _, dur in events:
        by_name[name].append(dur)
    kernels = [{"name": name, "per_call": len(d) / calls, "median_us": statistics.median(d)}
               for name, d in by_name.items()]
    kernels.sort(key=lambda r: -r["median_us"] * r["per_call"])
    total = sum(r["per_call"] * r["median_us"] for r in kernels)
    per = max(1, round(len(events) / calls))
    starts = [events[i][1] for i in range(0, len(events), per)]
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    return {"kernels": kernels, "total_us": total, "start_to_start_us": statistics.median(gaps) if gaps else None}


def profile_calls(fn, n_rot, calls, dev, graph):
    """Runs `calls` calls under torch.profiler: eagerly, or replayed from one CUDA graph."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    g = None
    if graph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for i in range(min(n_rot, 3)):
                fn(i)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for c in range(calls):
                fn(c % n_rot)
        g.replay()
        torch.cuda.synchronize()
    with profile(activities=acts) as prof:
        if g is not None:
            g.replay()
        else:
            for c in range(calls):
                fn(c % n_rot)
        if dev == "cuda":
            torch.cuda.synchronize()
    del g
    return summarise(device_events(prof, dev), calls)


def short(name, width=90):
    return name if len(name) <= width else name[: width - 3] + "..."


def run_point(spec, args, dev, k, anchors, want, results, md_lines):
    op, shape = spec.split(":")
    n, d = (int(v) for v in shape.split("x"))
    if dev == "cpu":
        d = min(d, 256)
        n = min(n, 8)
    es = torch.empty((), dtype=DTYPE[op]).element_size()
    n_rot = harness.rotations_for(point_bytes(op, n, d, es))
    impls = make_point(op, n, d, dev, k, anchors, want, n_rot)
    title = f"{op} {str(DTYPE[op]).split('.')[-1]} {n}x{d} ({n_rot} input copies)"
    print(f"\n=== {title}")
    md_lines += [f"\n### {title}\n", "| impl | kernels/call | device us/call (eager) | device us/call (graph) "
                 "| graph start-to-start us/call | harness us | kernels (median us, launches/call) |",
                 "|---|---:|---:|---:|---:|---:|---|"]
    for name, fn in impls.items():
        rec = {"point": spec, "rows": n, "hidden": d, "impl": name}
        try:
            for i in range(min(n_rot, 3)):  # warm-up: compile, autotune, allocator
                fn(i)
                fn(i)
            if dev == "cuda":
                torch.cuda.synchronize()
            if args.ncu_driver:
                torch.cuda.cudart().cudaProfilerStart()
                for c in range(3):
                    fn(c % n_rot)
                torch.cuda.synchronize()
                torch.cuda.cudart().cudaProfilerStop()
                print(f"  {name}: 3 calls between cudaProfilerStart/Stop")
                continue
            rec["eager"] = profile_calls(fn, n_rot, args.calls, dev, graph=False)
            if rec["eager"] is None:
                raise RuntimeError("the profiler recorded no activity")
            if dev == "cuda" and not args.no_graph:
                try:
                    rec["graph"] = profile_calls(fn, n_rot, args.calls, dev, graph=True)
                    if rec["graph"] is None:
                        rec["graph_error"] = "no kernel records from the graph replay"
                except Exception as e:  # noqa: BLE001 - capture may fail; the eager numbers stand
                    rec["graph_error"] = f"{type(e).__name__}: {e}"
            if not args.no_time:
                rec["harness_us"] = harness.time_us(fn, n_rot, device=dev).us
        except Exception as e:  # noqa: BLE001 - one failing impl must not end the run
            rec["error"] = f"{type(e).__name__}: {e}"
            print(f"  {name}: FAILED {rec['error']}")
            results.append(rec)
            continue
        results.append(rec)
        eager, graph = rec["eager"], rec.get("graph")
        per_call = sum(kk["per_call"] for kk in eager["kernels"])
        g_total = f"{graph['total_us']:.2f}" if graph else "-"
        g_s2s = f"{graph['start_to_start_us']:.2f}" if graph and graph["start_to_start_us"] else "-"
        h = f"{rec['harness_us']:.2f}" if "harness_us" in rec else "-"
        what = "ops" if dev == "cpu" else "kernels"
        print(f"  {name:8s} {per_call:.2g} {what}/call; device us/call: eager {eager['total_us']:.2f}, "
              f"graph {g_total}; graph start-to-start {g_s2s}; harness {h}"
              + (f"  (graph: {rec['graph_error'][:100]})" if "graph_error" in rec else ""))
        for kk in eager["kernels"]:
            gk = next((x for x in graph["kernels"] if x["name"] == kk["name"]), None) if graph else None
            g_us = f"{gk['median_us']:7.2f} us graph" if gk else "      - (graph)"
            print(f"      {kk['median_us']:7.2f} us eager, {g_us}  x{kk['per_call']:.2g}  {short(kk['name'])}")
        names = "; ".join(f"{short(kk['name'], 60)} ({kk['median_us']:.2f}, x{kk['per_call']:.2g})"
                          for kk in eager["kernels"])
        md_lines.append(f"| {name} | {per_call:.2g} | {eager['total_us']:.2f} | {g_total} | {g_s2s} | {h} | "
                        f"{names.replace('|', '/')} |")


def main(argv=None) -> int:
    p = harness.bench_parser(__doc__, "profile_latency")
    p.add_argument("--points", default=",".join(DEFAULT_POINTS),
                   help="comma-separated op:ROWSxHIDDEN (ops: " + ", ".join(HIDDEN) + ")")
    p.add_argument("--impls", default="ours,compile,liger")
    p.add_argument("--calls", type=int, default=64, help="calls profiled per implementation")
    p.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph profile")
    p.add_argument("--no-time", action="store_true", help="skip harness.time_us")
    p.add_argument("--ncu-driver", action="store_true",
                   help="no profiler: warm up, then 3 calls between cudaProfilerStart/Stop (for ncu)")
    args = p.parse_args(argv)
    dev = harness.bench_device(args.cpu_smoke, "profile_latency")
    if dev is None:
        return 0
    want = set(args.impls.split(","))
    points = [s for s in args.points.split(",") if s]
    if dev == "cpu":
        args.calls = min(args.calls, 4)
        args.ncu_driver = False
        points = list(dict.fromkeys(s.split(":")[0] + ":1x256" for s in points))
    k = harness.load_kernel()
    anchors = Anchors(dev, want)
    gpu = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    md_lines = [f"# Kernels per call and device time (torch.profiler), {gpu}, torch {torch.__version__}\n",
                f"{args.calls} calls per implementation; durations are medians of the profiler's "
                f"{'CUDA activity records' if dev == 'cuda' else 'CPU op records (smoke run)'}; "
                "start-to-start = median time between the first kernels of consecutive calls "
                "in one graph replay (device duration + per-node cost); harness = harness.time_us.\n"]
    results = []
    out = harness.out_dir()
    with torch.no_grad():
        for spec in points:
            run_point(spec, args, dev, k, anchors, want, results, md_lines)
            if dev == "cuda":
                torch.cuda.empty_cache()
            if not args.ncu_driver:  # after every point: a run cut short keeps what it measured
                (out / f"{args.name}.md").write_text("\n".join(md_lines) + "\n")
                (out / f"{args.name}.json").write_text(json.dumps({"device": gpu, "results": results}, indent=1))
    if not args.ncu_driver:
        print(f"\nwrote {out / (args.name + '.md')} and .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
