"""The CPU k-quant gemv (q4k_gemv, q6k_gemv) per instruction set, next to torch's fp32 and
bf16 matmul on the same inputs.

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

    python benchmarks/bench_q4k_cpu.py            # writes $OUT (or benchmarks/results)/bench_q4k_cpu.md
    python benchmarks/bench_q4k_cpu.py --cpu-smoke
"""

from __future__ import annotations

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


def worker(isa: str, data: Path, smoke: bool) -> None:
    torch.set_num_threads(os.cpu_count() or 1)
    ik = harness.load_kernel()
    assert ik.ops.cpu_isa() == isa, (ik.ops.cpu_isa(), isa)
    blob = torch.load(data)
    rows = []
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
    args = p.parse_args()
    smoke = args.cpu_smoke
    if args.worker:
        worker(args.worker, Path(args.data), smoke)
        return

    torch.set_num_threads(os.cpu_count() or 1)
    ik = harness.load_kernel()
    best = ik.ops.cpu_isa()
    isas = ISAS[: ISAS.index(best) + 1]
    shapes = [(64, 512)] if smoke else [(4096, 4096), (14336, 4096)]
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
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "weights.pt"
        torch.save({"weights": weights, "ms": ms}, data)
        for isa in isas:
            env = {**os.environ, "IK_CPU_ISA": isa}
            cmd = [sys.executable, __file__, "--worker", isa, "--data", str(data)]
            proc = subprocess.run(cmd + (["--cpu-smoke"] if smoke else []), env=env,
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"worker {isa} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
            line = next(l for l in proc.stdout.splitlines() if l.startswith("ROWS "))
            rows += json.loads(line[5:])

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
    md = harness.out_dir() / "bench_q4k_cpu.md"
    md.write_text(f"{header}\n")
    harness.print_table(headers, table, "CPU k-quant gemv vs torch matmul (x fp32)", md)
    worst = max(r["err"] for r in rows if r["impl"].startswith("ours"))
    print(f"largest relative error of ours against fp64: {worst:.2g}")


if __name__ == "__main__":
    main()
