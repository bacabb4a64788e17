"""The CPU k-quant gemv (q4k_gemv, q6k_gemv) per instruction set, next to torch's fp32 and
bf16 matmul on the same inputs; then the quantiser per instruction set, next to ggml's.

Shapes [M, 4096] x [N, 4096]^T for N = 4096 and 14336 (Llama-3-8B's q/o and gate/up),
M = 1 and 8, x fp32. For each instruction set this CPU has (baseline, avx2, avx512) a
worker process starts with IK_CPU_ISA set (the gemv reads it once, so one set per
process) and times, in that one process:
  * ours: the gemv on the quantised bytes (4.5 bits/weight Q4_K, 6.5625 Q6_K);
  * torch fp32: x @ W.T with W = the dequantised Q4_K weight in fp32;
  * torch bf16: the same in bf16 (x and W).
Every implementation is checked against an fp64 product first. Times: medians of
wall-clock loops (harness.time_us), torch.set_num_threads(os.cpu_count()), in two cache
states: "cold" rotates through weight copies totalling > 1 GiB (more than the L3 the CPU
reports here, so every call reads its weight from DRAM, as a decode step through a
multi-GB model does), "hot" reuses one copy (a weight that stays in L2/L3).
GB/s counts weight bytes only; "% read BW" compares with the read bandwidth measured
first (torch sum over 2 GiB of fp32, far beyond the L3).

Then, in the main process, ours at the best instruction set against ggml's CPU mul_mat on
the same bytes (llama.cpp's kernels, through ggml-python: x quantised to Q8_K, integer dot
products, ggml's own thread pool of as many threads), cold and hot, with both errors.

The quantiser: a 4096 x 4096 fp32 weight (randn * 0.02) to Q4_K and Q6_K, in each worker
with all threads and with one (best of 3 wall-clock calls), beside ggml's own quantiser
(ggml_quantize_chunk through ggml-python, one thread: it has no threads of its own) in
the main process. Every instruction set must give the same bytes. Its floor, reading the
fp32 weight once at the read bandwidth, is far below: the quantiser is compute-bound.
`--quantiser-only` skips the gemv.

    python benchmarks/bench_q4k_cpu.py            # writes $OUT (or benchmarks/results)/bench_q4k_cpu.md
    python benchmarks/bench_q4k_cpu.py --quantiser-only
    python benchmarks/bench_q4k_cpu.py --cpu-smoke
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ggml_quant  # noqa: E402
import harness  # noqa: E402

ISAS = ["baseline", "avx2", "avx512"]
FORMATS = {"Q4_K": ("quantize_q4_k", "dequantize_q4_k", "q4k_gemv", 144),
           "Q6_K": ("quantize_q6_k", "dequantize_q6_k", "q6k_gemv", 210)}
COLD_BYTES = 1 << 30


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def bandwidth(nbytes: int, reps: int = 5) -> tuple[float, float]:
    """(read GB/s from a sum, copy GB/s counting read + write) over nbytes of fp32."""
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    src.sum(), dst.copy_(src)
    reads, copies = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        src.sum()
        reads.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        dst.copy_(src)
        copies.append(time.perf_counter() - t0)
    return nbytes / statistics.median(reads) / 1e9, 2 * nbytes / statistics.median(copies) / 1e9


def copies_for(nbytes: int, cold: bool, smoke: bool) -> int:
    total = (8 << 20) if smoke else COLD_BYTES
    return max(2, -(-total // nbytes)) if cold else 1


def best_of(fn, reps: int = 3) -> float:
    """The fastest of `reps` wall-clock calls, in seconds (after one warm-up call)."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def time_quantiser(ik, isa: str, w: torch.Tensor) -> list[dict]:
    rows = []
    for fmt in FORMATS:
        q = ik.quant.quantize(w, fmt)
        for threads in (os.cpu_count() or 1, 1):
            torch.set_num_threads(threads)
            rows.append(dict(isa=isa, fmt=fmt, threads=threads, s=best_of(lambda: ik.quant.quantize(w, fmt)),
                             sha=hashlib.sha256(q.numpy().tobytes()).hexdigest()[:16]))
    torch.set_num_threads(os.cpu_count() or 1)
    return rows


def worker(isa: str, data: Path, smoke: bool) -> None:
    torch.set_num_threads(os.cpu_count() or 1)
    ik = harness.load_kernel()
    assert ik.ops.cpu_isa() == isa, (ik.ops.cpu_isa(), isa)
    blob = torch.load(data)
    print("QUANT " + json.dumps(time_quantiser(ik, isa, blob["quantiser_weight"])), flush=True)
    rows = []
    if blob["quantiser_only"]:
        blob["weights"] = {}
    for (n, k), weights in blob["weights"].items():
        for m in blob["ms"]:
            x = torch.randn(m, k)
            w32 = weights["Q4_K"][1]
            impls = {}
            for fmt, (q, w) in weights.items():
                gemv = getattr(ik, FORMATS[fmt][2])
                ref = x.double() @ w.double().T
                err = harness.rel_err(gemv(x, q), ref)
                assert err < 1e-5, (fmt, err)
                impls[f"ours {fmt}"] = (gemv, q, x, err)
            ref = x.double() @ w32.double().T
            xb, wb = x.bfloat16(), w32.bfloat16()
            impls["torch fp32"] = (lambda a, b: a @ b.T, w32, x, harness.rel_err(x @ w32.T, ref))
            impls["torch bf16"] = (lambda a, b: a @ b.T, wb, xb, harness.rel_err(xb @ wb.T, ref))
            for name, (fn, wt, xt, err) in impls.items():
                for cache in ("cold", "hot"):
                    nb = wt.numel() * wt.element_size()
                    copies = [wt] + [wt.clone() for _ in range(copies_for(nb, cache == "cold", smoke) - 1)]
                    t = harness.time_us(lambda i: fn(xt, copies[i]), len(copies), device="cpu",
                                        trials=9, min_calls=4 if smoke else 16)
                    del copies
                    rows.append(dict(isa=isa, n=n, k=k, m=m, impl=name, cache=cache, us=t.us,
                                     bytes=nb, err=err))
    print("ROWS " + json.dumps(rows))


def main() -> None:
    p = harness.bench_parser(__doc__, "bench_q4k_cpu")
    p.add_argument("--worker", choices=ISAS)
    p.add_argument("--data")
    p.add_argument("--quantiser-only", action="store_true", help="time the quantiser, not the gemv")
    args = p.parse_args()
    smoke = args.cpu_smoke
    if args.worker:
        worker(args.worker, Path(args.data), smoke)
        return

    torch.set_num_threads(os.cpu_count() or 1)
    ik = harness.load_kernel()
    best = ik.ops.cpu_isa()
    isas = ISAS[: ISAS.index(best) + 1]
    shapes = [] if args.quantiser_only else [(64, 512)] if smoke else [(4096, 4096), (14336, 4096)]
    ms = [1, 8]
    read_bw, copy_bw = bandwidth(64 << 20 if smoke else 2 << 30)
    read_l3, copy_l3 = bandwidth(32 << 20)
    header = (f"CPU: {cpu_model()}, {os.cpu_count()} threads (torch.set_num_threads), torch "
              f"{torch.__version__}; ISAs: {', '.join(isas)} (best: {best})\n"
              f"bandwidth over {'64 MiB' if smoke else '2 GiB'}: read (sum) {read_bw:.1f} GB/s, "
              f"copy {copy_bw:.1f} GB/s (read + write); over 32 MiB: read {read_l3:.1f}, "
              f"copy {copy_l3:.1f} GB/s")
    print(header)

    weights = {}
    for n, k in shapes:
        w = torch.randn(n, k)
        weights[(n, k)] = {}
        for fmt, (qn, dqn, _, _) in FORMATS.items():
            q = getattr(ik, qn)(w)
            weights[(n, k)][fmt] = (q, getattr(ik, dqn)(q))
    torch.manual_seed(0)
    wq = torch.randn(64, 512) * 0.02 if smoke else torch.randn(4096, 4096) * 0.02
    rows, quant_rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "weights.pt"
        torch.save({"weights": weights, "ms": ms, "quantiser_weight": wq,
                    "quantiser_only": args.quantiser_only}, data)
        for isa in isas:
            env = {**os.environ, "IK_CPU_ISA": isa}
            cmd = [sys.executable, __file__, "--worker", isa, "--data", str(data)]
            proc = subprocess.run(cmd + (["--cpu-smoke"] if smoke else []), env=env,
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"worker {isa} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
            line = next(l for l in proc.stdout.splitlines() if l.startswith("ROWS "))
            rows += json.loads(line[5:])
            line = next(l for l in proc.stdout.splitlines() if l.startswith("QUANT "))
            quant_rows += json.loads(line[6:])
    md = harness.out_dir() / "bench_q4k_cpu.md"
    md.write_text(f"{header}\n")
    quantiser_table(quant_rows, wq, read_bw, md)

    # One table row per (shape, M, cache, ISA): our two formats and torch's two dtypes.
    def get(isa, n, m, impl, cache):
        return next(r for r in rows if (r["isa"], r["n"], r["m"], r["impl"], r["cache"])
                    == (isa, n, m, impl, cache))

    headers = ["N x K", "M", "cache", "ISA", "Q4_K us", "Q6_K us", "fp32 us", "bf16 us",
               "fp32/Q4_K", "bf16/Q4_K", "fp32/Q6_K", "Q4_K GB/s", "Q4_K % read BW"]
    table = []
    for n, k in shapes:
        for m in ms:
            for cache in ("cold", "hot"):
                for isa in isas:
                    q4, q6 = get(isa, n, m, "ours Q4_K", cache), get(isa, n, m, "ours Q6_K", cache)
                    f32, b16 = get(isa, n, m, "torch fp32", cache), get(isa, n, m, "torch bf16", cache)
                    gbs = q4["bytes"] / q4["us"] / 1e3
                    table.append([f"{n} x {k}", m, cache, isa, q4["us"], q6["us"], f32["us"],
                                  b16["us"], f32["us"] / q4["us"], b16["us"] / q4["us"],
                                  f32["us"] / q6["us"], gbs, 100 * gbs / read_bw])
    if table:
        harness.print_table(headers, table, "CPU k-quant gemv vs torch matmul (x fp32)", md)
        worst = max(r["err"] for r in rows if r["impl"].startswith("ours"))
        print(f"largest relative error of ours against fp64: {worst:.2g}")
        ggml_table(rows, weights, ms, best, smoke, md)


def ggml_table(rows: list[dict], weights: dict, ms: list[int], best: str, smoke: bool, md: Path) -> None:
    """Ours at the CPU's best instruction set against ggml's CPU mul_mat (llama.cpp's
    kernels: x quantised to Q8_K, integer dot products) on the same bytes, ggml's own
    threads as many as torch's, in this process."""
    threads = os.cpu_count() or 1
    table = []
    try:
        for (n, k), fmts in weights.items():
            for m in ms:
                x = torch.randn(m, k)
                for fmt, (q, w) in fmts.items():
                    ref = x.double() @ w.double().T
                    for cache in ("cold", "hot"):
                        copies = copies_for(q.numel(), cache == "cold", smoke)
                        mm = ggml_quant.MulMat(q, fmt, k, m, copies=copies, threads=threads)
                        try:
                            mm.set_x(x)
                            mm.run(0)
                            err = harness.rel_err(mm.out(0), ref)
                            t = harness.time_us(lambda i: mm.run(i), copies, device="cpu", trials=9,
                                                min_calls=4 if smoke else 16)
                        finally:
                            mm.close()
                        ours = next(r for r in rows if (r["isa"], r["n"], r["m"], r["impl"], r["cache"])
                                    == (best, n, m, f"ours {fmt}", cache))
                        table.append([f"{n} x {k}", m, cache, fmt, ours["us"], t.us, t.us / ours["us"],
                                      f"{ours['err']:.1e}", f"{err:.1e}"])
    except ImportError as e:
        print(f"ggml-python unavailable ({e}): no ggml table")
        return
    harness.print_table(["N x K", "M", "cache", "format", f"ours us ({best})", "ggml us", "ggml / ours",
                         "ours rel err", "ggml rel err"], table,
                        f"CPU k-quant gemv against ggml's mul_mat (llama.cpp's CPU kernels, x quantised "
                        f"to Q8_K), {threads} threads each; errors against the fp64 product of the "
                        f"dequantised weight", md)


def quantiser_table(rows: list[dict], w: torch.Tensor, read_bw: float, md: Path) -> None:
    """Ours per instruction set against ggml's quantiser (one thread), on the same weight."""
    for fmt in FORMATS:
        shas = {r["sha"] for r in rows if r["fmt"] == fmt}
        if len(shas) != 1:
            sys.exit(f"{fmt}: the instruction sets gave different bytes ({sorted(shas)})")
    ggml = {}
    try:
        for fmt in FORMATS:
            torch.set_num_threads(1)
            ggml[fmt] = best_of(lambda: ggml_quant.quantize(w, fmt))
    except ImportError as e:
        print(f"ggml-python unavailable ({e}): no ggml column")
    finally:
        torch.set_num_threads(os.cpu_count() or 1)
    floor_s = w.numel() * 4 / (read_bw * 1e9)
    table = []
    for r in rows:
        g = ggml.get(r["fmt"])
        table.append([r["fmt"], r["isa"], r["threads"], r["s"], 1e9 * r["s"] * r["threads"] / w.numel(),
                      g if r["threads"] == 1 else None, g / r["s"] if g and r["threads"] == 1 else None,
                      100 * floor_s / r["s"], r["sha"]])
    harness.print_table(["format", "ISA", "threads", "ours s", "ns a weight a thread", "ggml s (1 thread)",
                         "ggml / ours", "% read floor", "bytes (sha256)"], table,
                        f"CPU quantiser, {w.shape[0]} x {w.shape[1]} fp32 weight (randn * 0.02), best of 3; "
                        f"read floor {1e3 * floor_s:.2f} ms", md)


if __name__ == "__main__":
    main()
