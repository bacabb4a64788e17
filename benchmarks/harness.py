"""Small helpers shared by the benchmark scripts in this folder.

Standard library + torch only. Everything here also works on a CPU-only
machine (timings then fall back to wall-clock), so the scripts can be smoke
tested without a GPU.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
REPO_ID = "inference-kernels/inference-kernels"

# huggingface_hub reads HF_HUB_OFFLINE once, when it is first imported, so it
# has to be in the environment before `kernels` (which imports it) is loaded.
# The GPU machine has no network: without this a failed local lookup would
# hang on Hub requests instead of failing fast.
os.environ["HF_HUB_OFFLINE"] = "1"


def load_kernel():
    """Load our kernel from the repo's build/ folder through the Kernel Hub loader.

    LOCAL_KERNELS maps the Hub repo id to a local path, so this exercises the
    same `get_kernel` code path users hit, without any download. An existing
    LOCAL_KERNELS (e.g. pointing at another build) is left alone.
    """
    os.environ.setdefault("LOCAL_KERNELS", f"{REPO_ID}={REPO / 'build'}")
    os.environ["HF_HUB_OFFLINE"] = "1"
    import kernels

    try:  # in case huggingface_hub was imported before this module set the env
        from huggingface_hub import constants

        constants.HF_HUB_OFFLINE = True
    except Exception:
        pass
    return kernels.get_kernel(REPO_ID, version=1)


def bench_device(cpu_smoke: bool, script: str) -> str | None:
    """"cuda"; "cpu" for a --cpu-smoke run (checks the script, times nothing useful);
    None, after saying so, when there is no GPU and no smoke run was asked for."""
    if cpu_smoke:
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    print(f"{script}: no CUDA device, nothing to measure (use --cpu-smoke to test the script)")
    return None


def bench_parser(doc: str, name: str):
    """The options every side-by-side script takes: --quick, --cpu-smoke, --name."""
    import argparse

    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--cpu-smoke", action="store_true")
    p.add_argument("--name", default=name)
    return p


def without_pdl(f):
    """f with every package kernel launched plainly: launch.cuh reads IK_PDL at each launch,
    so one process times both (CUDA-graph capture records the launches as made)."""
    def run(*args):
        old = os.environ.get("IK_PDL")
        os.environ["IK_PDL"] = "0"
        try:
            return f(*args)
        finally:
            os.environ.pop("IK_PDL") if old is None else os.environ.update(IK_PDL=old)
    return run


def with_no_pdl(impls: dict, dev) -> dict:
    """impls with "ours no PDL" (our kernel, every launch plain) right after "ours", on CUDA:
    back-to-back calls of a dependent kernel overlap its launch with the call before, which
    torch's kernels (the anchors) never do, so the tables show both."""
    if dev != "cuda" or "ours" not in impls:
        return impls
    out = {}
    for name, f in impls.items():
        out[name] = f
        if name == "ours":
            out["ours no PDL"] = without_pdl(f)
    return out


def rel_err(y, ref) -> float:
    """||y - ref|| / ||ref||, in fp64 (ref: an fp64 reference)."""
    return ((y.double() - ref).norm() / ref.norm()).item()


def out_dir() -> Path:
    """Where results go: $OUT if set (the GPU runner collects it), else benchmarks/out/."""
    d = Path(os.environ["OUT"]) if os.environ.get("OUT") else REPO / "benchmarks" / "out"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def copy_bandwidth(nbytes: int = 2 << 30, reps: int = 10, device="cuda") -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read + bytes written.

    A plain `dst.copy_(src)` of `nbytes` (default 2 GiB, far beyond L2) is the
    practical ceiling for a memory-bound kernel that reads each byte once and
    writes each byte once. Median of `reps` event-timed copies.
    """
    dev = torch.device(device)
    if dev.type != "cuda":
        nbytes = min(nbytes, 64 << 20)  # keep the CPU smoke run quick
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    src.fill_(1)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    _sync(dev)
    times = []
    for _ in range(reps):
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - t0)
    del src, dst
    return 2 * nbytes / statistics.median(times)


def rotations_for(bytes_per_copy: int, target_bytes: int = 200 << 20, max_copies: int = 256) -> int:
    """How many input copies to rotate through so their total exceeds `target_bytes`.

    Capped: for tiny inputs (decode rows) reaching 200 MB would need thousands
    of copies and a huge graph; those shapes are latency-bound, and their
    inputs would be L2-hot in a real model anyway (just written by the
    previous op).
    """
    return max(1, min(max_copies, math.ceil(target_bytes / max(1, bytes_per_copy))))


@dataclass
class Timing:
    us: float  # median time per call, microseconds
    method: str  # "cuda-graph", "cuda-events" (graph capture failed) or "cpu-wallclock"
    note: str = ""  # why the graph fallback happened, if it did


def time_us(fn, n_rotations: int, *, device="cuda", trials: int = 15, min_calls: int = 32,
            trial_us: float = 2000.0) -> Timing:
    """Median time of one `fn(i)` call, in microseconds.

    Method (CUDA):
      * `fn(i)` must launch one call of the op on input copy `i`
        (0 <= i < n_rotations). Cycling through copies whose total size is
        well above the L2 (50-60 MB on H100/H200) makes every call read its
        input from HBM, as in a real model with large activations; pass
        n_rotations=1 to measure the L2-hot case.
      * Warm up eagerly on a side stream (JIT/Triton/torch.compile compile,
        allocator caches), as CUDA-graph capture requires.
      * Capture ONE graph that calls fn(0), fn(1), ..., in sequence, at least
        `min_calls` calls in total (whole rotation cycles), so launch overhead
        is not measured and the GPU never waits on the CPU.
      * Replay it once more to warm up, then time `trials` batches of replays
        with CUDA events (each batch ~`trial_us` long) and return the median
        of batch_time / calls_in_batch.
    If capture fails (an op that syncs or allocates host memory), fall back to
    the same loop without a graph, timed with events; that includes launch
    gaps, so it overstates small-op times. `Timing.method`/`note` say so.
    On a CPU device, the same loop is timed with time.perf_counter().
    """
    dev = torch.device(device)
    cycles = max(1, math.ceil(min_calls / n_rotations))
    calls = cycles * n_rotations

    def run_all():
        for _ in range(cycles):
            for i in range(n_rotations):
                fn(i)

    if dev.type != "cuda":
        run_all()  # warm-up (and compile)
        samples = []
        for _ in range(max(3, trials // 3)):
            t0 = time.perf_counter()
            run_all()
            samples.append((time.perf_counter() - t0) * 1e6 / calls)
        return Timing(statistics.median(samples), "cpu-wallclock")

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            run_all()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph, note = None, ""
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run_all()
        replay = graph.replay
        method = "cuda-graph"
    except Exception as e:  # noqa: BLE001 - anything that breaks capture
        graph = None
        note = f"graph capture failed ({type(e).__name__}: {str(e).splitlines()[0][:120]}); plain event timing"
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        replay = run_all
        method = "cuda-events"

    def timed(reps: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3  # ms -> us

    timed(1)  # warm-up replay
    one = timed(1)
    reps = max(1, min(200, round(trial_us / max(one, 1e-3))))
    samples = [timed(reps) / (reps * calls) for _ in range(trials)]
    del graph
    return Timing(statistics.median(samples), method, note)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != v:  # NaN
            return "-"
        return f"{v:.2f}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def print_table(headers, rows, title: str | None = None, md_path=None) -> None:
    """Print an aligned text table and append the same table, in markdown, to `md_path`.

    Cells may be str/int/float/None; floats get 2 decimals, None prints "-".
    """
    cells = [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(str(h)), *(len(r[j]) for r in cells)) if cells else len(str(h))
              for j, h in enumerate(headers)]
    if title:
        print(f"\n{title}")
    print("  ".join(str(h).rjust(w) for h, w in zip(headers, widths)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    if md_path is not None:
        with open(md_path, "a") as f:
            if title:
                f.write(f"\n### {title}\n\n")
            f.write("| " + " | ".join(map(str, headers)) + " |\n")
            f.write("|" + "|".join("---:" for _ in headers) + "|\n")
            for r in cells:
                f.write("| " + " | ".join(r) + " |\n")
            f.write("\n")


# --- side-by-side tables: one row per (rows, hidden) point ------------------

def fmt_us(t):
    if t is None:
        return "-"
    return f"{t.us:.2f}" + ("*" if t.method == "cuda-events" else "")


def ratio(anchor, ours):
    return f"{anchor.us / ours.us:.2f}x" if anchor and ours else "-"


def measure(name, fn, n_rot, dev, log):
    try:
        t = time_us(fn, n_rot, device=dev)
    except Exception as e:  # noqa: BLE001 - one failing column must not kill the sweep
        print(f"    {name}: timing failed: {type(e).__name__}: {e}")
        log["errors"].append(f"{name}: {type(e).__name__}: {e}")
        return None
    if t.note:
        print(f"    {name}: {t.note}")
        log["notes"].append(f"{name}: {t.note}")
    return t


def err_summary(errs, tol):
    return "  ".join(f"{k}={'ERR' if v is None else f'{v:.1e}'}{' FAIL' if v is not None and v > tol else ''}"
                     for k, v in errs.items())


def table_headers(names):
    return (["rows", "copies"] + [f"{k} us" for k in names]
            + [f"{k}/ours" for k in names if k != "ours"] + ["floor us", "ours %floor"])


def time_point(op, impls, errs, call, n, d, dtype, nbytes, n_rot, bw, dev, results):
    """Times every implementation that passed its check at one (rows, hidden) point;
    returns the table row and appends the raw numbers to `results`."""
    log = {"errors": [], "notes": []}
    times = {}
    for name, f in impls.items():
        times[name] = None if errs[name] is None else measure(
            name, lambda i, f=f: call(f, i), n_rot, dev, log)
    if dev == "cuda":
        torch.cuda.empty_cache()
    names = list(impls)
    floor_us = nbytes / bw * 1e6
    ours = times.get("ours")
    row = [n, n_rot] + [fmt_us(times[k]) for k in names]
    row += [ratio(times[k], ours) for k in names if k != "ours"]
    row += [f"{floor_us:.2f}", f"{100 * floor_us / ours.us:.0f}%" if ours else "-"]
    results.append({
        "op": op, "rows": n, "hidden": d, "dtype": str(dtype), "copies": n_rot,
        "bytes": nbytes, "floor_us": floor_us, "rel_err": errs,
        "us": {k: (t.us if t else None) for k, t in times.items()},
        "method": {k: (t.method if t else None) for k, t in times.items()}, **log,
    })
    return row
