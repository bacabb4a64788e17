"""Roofline report: every CUDA kernel of the package and its torch baseline under Nsight
Compute on the GPU, as a table and a roofline plot.

For each op of roofline_workload.OPS this runs

    ncu --csv --print-units base --clock-control none --profile-from-start off
        [--kernel-name regex:...] --metrics <METRICS> python roofline_workload.py --op OP

(the workload runs the op `--reps` times between cudaProfilerStart/Stop), parses the
CSV, sums each op's kernels per call, and reports time, DRAM bytes and throughput,
FP32 FLOPs (fadd + fmul + 2 * ffma, thread-level SASS counts; for the matmuls, whose
products run on tensor cores, the op's 2 M N K instead: roofline_workload.MATMUL_FLOPS),
arithmetic intensity
(FLOP per DRAM byte), achieved FLOP/s, global-load sectors per request (coalescing:
4 is ideal for 16-byte loads of a warp... 32 means every thread its own sector) and
the long-scoreboard stall share. The plot puts one point per kernel/baseline under the
bandwidth ceiling (measured copy bandwidth, or --bw), the FP32 compute ceiling
(--peak-tflops, H200 SXM's 67 TFLOP/s non-tensor FP32 by default) and, where a matmul is
plotted, the dense FP8 tensor ceiling (--tensor-tflops, 1979).

    python benchmarks/roofline.py                       # on the GPU; writes $OUT/roofline.*
    python benchmarks/roofline.py --ops layer_norm/ours layer_norm/naive
    python benchmarks/roofline.py --from-csv DIR        # re-parse saved ncu CSVs, no GPU
    python benchmarks/roofline.py --from-json FILE      # redraw a saved roofline.json, no GPU

Parsing and plotting need no GPU (tests/test_roofline.py feeds a canned CSV).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent

METRICS = [
    "gpu__time_duration.sum",
    "dram__bytes.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
]

# Units ncu prints (base or scaled), to seconds / bytes. Percentages and counts pass as is.
_SCALE = {
    "nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
    "second": 1.0, "s": 1.0, "cycle": 1.0,
    "byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
    "kibyte": 1024.0, "mibyte": 1024.0 ** 2, "gibyte": 1024.0 ** 3,
}


def parse_value(text: str, unit: str = "") -> float | None:
    """A number as ncu prints it ('1,234.5', '12.3', 'n/a'), scaled to base units."""
    t = (text or "").strip().replace(",", "")
    if not t or t.lower() in ("n/a", "nan", "-"):
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    return v * _SCALE.get((unit or "").strip().lower(), 1.0)


def _csv_lines(text: str) -> list[str]:
    """The CSV part of ncu's output: from the quoted header on, without ==PROF== lines
    and whatever the profiled program printed before it."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    return [ln for ln in lines[start:] if ln.strip() and not ln.startswith("==")]


@dataclass
class Kernel:
    id: str
    name: str
    metrics: dict = field(default_factory=dict)


def parse_ncu_csv(text: str) -> list[Kernel]:
    """Kernels in launch order, each with {metric: value in base units}.

    Accepts both layouts of `ncu --csv`: the default (details page), one row per kernel
    and metric with "ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value";
    and `--page raw`, one row per kernel with a column per metric, after a row of units.
    """
    lines = _csv_lines(text)
    if not lines:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header, body = rows[0], rows[1:]
    col = {h: i for i, h in enumerate(header)}
    kernels: dict[str, Kernel] = {}
    name_col = col.get("Kernel Name", col.get("Function Name"))

    def kernel(r):
        kid = r[col["ID"]]
        if kid not in kernels:
            kernels[kid] = Kernel(kid, r[name_col] if name_col is not None else "?")
        return kernels[kid]

    if "Metric Name" in col:
        unit_col = col.get("Metric Unit")
        for r in body:
            if len(r) < len(header):
                continue
            v = parse_value(r[col["Metric Value"]], r[unit_col] if unit_col is not None else "")
            kernel(r).metrics[r[col["Metric Name"]]] = v
    else:
        units = {}
        for r in body:
            if len(r) < len(header):
                continue
            if not r[col["ID"]].strip().isdigit():  # the units row of --page raw
                units = {h: r[i] for i, h in enumerate(header)}
                continue
            k = kernel(r)
            for h, i in col.items():
                if "__" in h:  # metric columns: unit__name.rollup
                    k.metrics[h] = parse_value(r[i], units.get(h, ""))
    return list(kernels.values())


@dataclass
class OpReport:
    op: str
    kernels: list[str]
    calls: int
    time_s: float
    dram_bytes: float
    flops: float
    sm_pct: float | None
    dram_pct: float | None
    sectors_per_request: float | None
    long_scoreboard_pct: float | None
    occupancy_pct: float | None
    flops_kind: str = "fp32"  # "fp32": SASS FP32 counts; "2mnk": a matmul's 2 M N K

    @property
    def intensity(self) -> float:  # FLOP per DRAM byte
        return self.flops / self.dram_bytes if self.dram_bytes else float("nan")

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.time_s if self.time_s else float("nan")

    @property
    def bytes_per_s(self) -> float:
        return self.dram_bytes / self.time_s if self.time_s else float("nan")


def _get(k: Kernel, name: str) -> float:
    v = k.metrics.get(name)
    return 0.0 if v is None else v


def summarize(op: str, kernels: list[Kernel], calls: int, matmul_flops: float | None = None) -> OpReport:
    """One call of `op`: its kernels' times, bytes and FLOPs summed (divided by `calls`);
    percentages averaged weighted by kernel time. `matmul_flops`: a matmul's 2 M N K a
    call, which replaces the FP32 instruction counts (tensor-core work is not in them)."""
    calls = max(1, calls)
    t = [_get(k, "gpu__time_duration.sum") for k in kernels]
    total_t = sum(t)

    def dram(k):
        if k.metrics.get("dram__bytes.sum") is not None:
            return k.metrics["dram__bytes.sum"]
        return _get(k, "dram__bytes_read.sum") + _get(k, "dram__bytes_write.sum")

    def flops(k):
        return (_get(k, "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum")
                + _get(k, "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum")
                + 2 * _get(k, "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"))

    def weighted(name):
        pairs = [(k.metrics.get(name), ti) for k, ti in zip(kernels, t)]
        pairs = [(v, ti) for v, ti in pairs if v is not None]
        if not pairs:
            return None
        w = sum(ti for _, ti in pairs)
        return sum(v * ti for v, ti in pairs) / w if w else sum(v for v, _ in pairs) / len(pairs)

    sectors = sum(_get(k, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum") for k in kernels)
    requests = sum(_get(k, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum") for k in kernels)
    names = list(dict.fromkeys(k.name for k in kernels))
    return OpReport(op, names, calls, total_t / calls, sum(map(dram, kernels)) / calls,
                    matmul_flops if matmul_flops is not None else sum(map(flops, kernels)) / calls,
                    weighted("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
                    weighted("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
                    sectors / requests if requests else None,
                    weighted("smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct"),
                    weighted("sm__warps_active.avg.pct_of_peak_sustained_active"),
                    "fp32" if matmul_flops is None else "2mnk")


HEADERS = ["op", "kernels", "us/call", "DRAM MB", "GB/s", "DRAM %peak", "SM %peak", "MFLOP",
           "FLOP/B", "GFLOP/s", "sectors/req", "long-sb stall %", "occupancy %"]


def table_rows(reports: list[OpReport]) -> list[list]:
    def pct(v):
        return None if v is None else round(v, 1)

    return [[r.op, len(r.kernels), r.time_s * 1e6, r.dram_bytes / 1e6, r.bytes_per_s / 1e9,
             pct(r.dram_pct), pct(r.sm_pct), r.flops / 1e6, r.intensity, r.flops_per_s / 1e9,
             None if r.sectors_per_request is None else round(r.sectors_per_request, 2),
             pct(r.long_scoreboard_pct), pct(r.occupancy_pct)] for r in reports]


def plot_roofline(reports: list[OpReport], bw: float, peak_flops: float, path: Path,
                  title: str = "Roofline", tensor_flops: float = 1979e12) -> Path:
    """Arithmetic intensity (FLOP/DRAM byte) vs achieved FLOP/s, log-log, with the
    bandwidth ceiling (bw * AI) and the compute ceiling (peak_flops); with a matmul among
    the points, also the tensor ceiling (tensor_flops, dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [r for r in reports if r.flops > 0 and r.dram_bytes > 0 and r.time_s > 0]
    fig, ax = plt.subplots(figsize=(10.5, 6))
    ais = [r.intensity for r in pts] or [1.0]
    ridges = [peak_flops / bw] + ([tensor_flops / bw] if any(r.flops_kind == "2mnk" for r in pts) else [])
    lo = 10 ** math.floor(math.log10(min(ais + ridges) / 10))
    hi = 10 ** math.ceil(math.log10(max(ais + ridges) * 10))
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(peak_flops, bw * x) for x in xs], "k-", lw=1.5)
    ridge = peak_flops / bw
    ax.annotate(f"{bw / 1e12:.2f} TB/s", (lo * 2, bw * lo * 2), rotation=0, fontsize=8,
                va="bottom")
    ax.annotate(f"FP32 {peak_flops / 1e12:.0f} TFLOP/s (ridge {ridge:.1f} FLOP/B)",
                (ridge, peak_flops), fontsize=8, va="bottom")
    if any(r.flops_kind == "2mnk" for r in pts):
        ax.plot(xs, [min(tensor_flops, bw * x) for x in xs], "k--", lw=1)
        ax.annotate(f"FP8 tensor {tensor_flops / 1e12:.0f} TFLOP/s (matmuls)",
                    (tensor_flops / bw, tensor_flops), fontsize=8, va="bottom", ha="right")
    # One colour a family, one marker an implementation; a legend beside the axes (the
    # points of one intensity overlap too much for labels on the plot).
    markers = {"ours": "o", "torch": "s", "naive": "x", "compile": "^"}
    families = list(dict.fromkeys(r.op.split("/")[0] for r in pts))
    colours = plt.get_cmap("tab20")
    for r in pts:
        family, impl = r.op.split("/")[0], r.op.split("/")[-1]
        ax.scatter([r.intensity], [r.flops_per_s], marker=markers.get(impl, "D"), s=42, zorder=3,
                   color=colours(families.index(family) % 20), label=r.op,
                   **({"edgecolors": "black", "linewidths": 0.6} if impl == "ours" else {}))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
              title="o ours, s torch, x naive", title_fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte; FP32 counts, matmuls 2MNK)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def run_ncu(op: str, kernel_filter: str | None, reps: int, ncu: str, raw_dir: Path) -> str:
    cmd = [ncu, "--csv", "--print-units", "base", "--clock-control", "none",
           "--profile-from-start", "off", "--metrics", ",".join(METRICS)]
    if kernel_filter:
        cmd += ["--kernel-name", kernel_filter]
    cmd += [sys.executable, str(HERE / "roofline_workload.py"), "--op", op, "--reps", str(reps)]
    print(f"  {op}: {' '.join(cmd[:8])} ...", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    text = proc.stdout
    (raw_dir / f"{op.replace('/', '__')}.csv").write_text(text + "\n# stderr\n" + proc.stderr)
    if proc.returncode:
        raise RuntimeError(f"ncu exited {proc.returncode}: {(proc.stderr or text)[-600:]}")
    return text


def report(reports: list[OpReport], bw: float, peak: float, out: Path, note: str,
           tensor: float = 1979e12) -> None:
    sys.path.insert(0, str(HERE))
    import harness

    md = out / "roofline.md"
    md.write_text(f"# Roofline (Nsight Compute)\n\n{note}\n")
    harness.print_table(HEADERS, table_rows(reports), "per call, DRAM traffic and work (FP32 instruction counts; "
                        "the matmuls' MFLOP are their 2 M N K)", md)
    with open(md, "a") as f:
        for r in reports:
            f.write(f"- `{r.op}`: {', '.join(r.kernels)}\n")
    (out / "roofline.json").write_text(json.dumps(
        {"bw": bw, "peak_flops": peak, "tensor_flops": tensor, "ops": [asdict(r) for r in reports]}, indent=1))
    png = plot_roofline(reports, bw, peak, out / "roofline.png",
                        "inference-kernels vs torch, H200 (Nsight Compute)", tensor)
    print(f"wrote {md}, {png}")


def main(argv=None) -> int:
    sys.path.insert(0, str(HERE))
    import roofline_workload

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", nargs="+", default=list(roofline_workload.OPS))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--ncu", default=shutil.which("ncu") or "ncu")
    p.add_argument("--bw", type=float, help="bandwidth ceiling, GB/s (default: measured copy bandwidth)")
    p.add_argument("--peak-tflops", type=float, default=67.0, help="FP32 ceiling (H200 SXM: 67)")
    p.add_argument("--tensor-tflops", type=float, default=1979.0,
                   help="the matmuls' ceiling: dense FP8 tensor (H200 SXM: 1979)")
    p.add_argument("--from-csv", type=Path, help="parse saved <op>.csv files from this folder instead")
    p.add_argument("--from-json", type=Path, help="redraw the table and plot of a saved roofline.json")
    p.add_argument("--note", default="", help="a line for the report (what was measured, when)")
    args = p.parse_args(argv)
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else HERE / "out"
    out.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        reports = [OpReport(**r) for r in saved["ops"]]
        report(reports, saved["bw"], saved["peak_flops"], out,
               args.note or f"redrawn from {args.from_json.name}; bandwidth ceiling "
                            f"{saved['bw'] / 1e9:.0f} GB/s", saved.get("tensor_flops", args.tensor_tflops * 1e12))
        return 0
    raw = out / "ncu_csv"
    raw.mkdir(exist_ok=True)
    if args.bw:
        bw, note = args.bw * 1e9, f"bandwidth ceiling {args.bw:.0f} GB/s (given)"
    elif args.from_csv:
        bw, note = 4.0e12, "bandwidth ceiling 4000 GB/s (assumed; pass --bw)"
    else:
        import harness
        import torch

        if not torch.cuda.is_available():
            print("roofline: no CUDA device (use --from-csv to re-parse saved output)")
            return 0
        bw = harness.copy_bandwidth()
        note = f"bandwidth ceiling {bw / 1e9:.0f} GB/s (measured device-to-device copy)"
    peak = args.peak_tflops * 1e12
    note += (f"; FP32 ceiling {args.peak_tflops:.0f} TFLOP/s, FP8 tensor {args.tensor_tflops:.0f}; "
             f"{args.reps} calls per op profiled")
    reports, failed = [], []
    for op in args.ops:
        try:
            if args.from_csv:
                text = (args.from_csv / f"{op.replace('/', '__')}.csv").read_text()
            else:
                text = run_ncu(op, roofline_workload.OPS[op], args.reps, args.ncu, raw)
            kernels = parse_ncu_csv(text)
            if not kernels:
                raise RuntimeError("no kernels in the ncu output")
            reports.append(summarize(op, kernels, args.reps, roofline_workload.MATMUL_FLOPS.get(op)))
        except Exception as e:  # noqa: BLE001 - one op failing must not lose the others
            print(f"  {op}: FAILED {type(e).__name__}: {str(e)[:400]}")
            failed.append(op)
    if reports:
        report(reports, bw, peak, out, note + (f"; failed: {', '.join(failed)}" if failed else ""),
               args.tensor_tflops * 1e12)
    return 1 if failed or not reports else 0


if __name__ == "__main__":
    raise SystemExit(main())
