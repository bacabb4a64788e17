"""The CPU norms and SwiGLU per instruction set, next to eager torch on the same inputs
(torch's own CPU kernels, which pick AVX2 / AVX-512 at run time): rms_norm and
fused_add_rms_norm against transformers' LlamaRMSNorm (the add before it for the fused
one), layer_norm against F.layer_norm (weight and bias), silu_mul against HF's LlamaMLP
activation F.silu(gate) * up.

Each on [rows, 4096] for rows 1, 64 and 1024, fp32, bf16 and fp16. For each instruction
set this CPU has (baseline, avx2, avx512) a worker process starts with IK_CPU_ISA set
(read once, so one set per process) and times ours and the eager reference in that one
process: medians of wall-clock loops (harness.time_us) over input copies rotated through
64 MB a tensor (past the L2; partly in a large L3),
torch.set_num_threads(os.cpu_count()). Every output is checked against an fp64
reference first (worst element's error relative to the row's largest). "% floor": the
bytes an op must move (rms_norm and layer_norm read x and write out, the fused add reads
and writes x and the residual, silu_mul reads gate and up and writes out) at the copy
bandwidth measured first (a 1 GiB fp32 copy, read + write), against ours with the CPU's
best instruction set.

    python benchmarks/bench_norm_cpu.py            # writes $OUT (or benchmarks/out)/bench_norm_cpu.md
    python benchmarks/bench_norm_cpu.py --cpu-smoke
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from bench_q4k_cpu import bandwidth  # noqa: E402
from bench_rms_norm import fused_add_rms_norm_eager, ref64, rms_norm_eager  # noqa: E402

ISAS = ("baseline", "avx2", "avx512")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def worst(y, ref) -> float:
    return ((y.double() - ref).abs().max() / ref.abs().max()).item()


def worker(smoke: bool) -> list[dict]:
    ik = harness.load_kernel()
    torch.set_num_threads(os.cpu_count())
    rows_list, hidden = ([1, 3], 256) if smoke else ([1, 64, 1024], 4096)
    out = []
    for dname, dt in DTYPES.items():
        for rows in rows_list:
            n_rot = max(1, min(64, (64 << 20) // (rows * hidden * dt.itemsize)))
            xs = [torch.randn(rows, hidden, dtype=dt) for _ in range(n_rot)]
            rs = [torch.randn(rows, hidden, dtype=dt) for _ in range(n_rot)]
            w = torch.randn(hidden, dtype=dt)
            ref = ref64(xs[0], w, 1e-5)
            s = (xs[0].double() + rs[0].double()).to(dt).double()  # the residual sum, rounded
            ref_add = ref64(s, w, 1e-5)
            b = torch.randn(hidden, dtype=dt)
            xd = xs[0].double()
            ref_ln = torch.nn.functional.layer_norm(xd, (hidden,), w.double(), b.double(), 1e-5)
            with torch.inference_mode():
                x0, r0 = xs[0].clone(), rs[0].clone()
                ik.fused_add_rms_norm(x0, r0, w, 1e-5)  # in place: r0 <- x + r0, x0 <- norm(r0)
                errs = {"rms_norm": worst(ik.rms_norm(xs[0], w, 1e-5), ref),
                        "fused_add_rms_norm": max(worst(x0, ref_add), worst(r0, s)),
                        "layer_norm": worst(ik.layer_norm(xs[0], w, b, 1e-5), ref_ln),
                        "silu_mul": worst(ik.silu_mul(xs[0], rs[0]),
                                          torch.nn.functional.silu(xd).to(dt).double() * rs[0].double())}
                t = {"rms_norm": harness.time_us(lambda i: ik.rms_norm(xs[i], w, 1e-5), n_rot, device="cpu"),
                     "rms_norm (ref)": harness.time_us(lambda i: rms_norm_eager(xs[i], w, 1e-5), n_rot, device="cpu"),
                     # in place on the copies: the values drift, the time does not
                     "fused_add_rms_norm": harness.time_us(lambda i: ik.fused_add_rms_norm(xs[i], rs[i], w, 1e-5),
                                                           n_rot, device="cpu"),
                     "fused_add_rms_norm (ref)": harness.time_us(
                         lambda i: fused_add_rms_norm_eager(xs[i], rs[i], w, 1e-5), n_rot, device="cpu"),
                     "layer_norm": harness.time_us(lambda i: ik.layer_norm(xs[i], w, b, 1e-5), n_rot, device="cpu"),
                     "layer_norm (ref)": harness.time_us(
                         lambda i: torch.nn.functional.layer_norm(xs[i], (hidden,), w, b, 1e-5), n_rot, device="cpu"),
                     "silu_mul": harness.time_us(lambda i: ik.silu_mul(xs[i], rs[i]), n_rot, device="cpu"),
                     "silu_mul (ref)": harness.time_us(lambda i: torch.nn.functional.silu(xs[i]) * rs[i], n_rot,
                                                       device="cpu")}
            out.append({"dtype": dname, "rows": rows, "hidden": hidden, "copies": n_rot,
                        "us": {k: v.us for k, v in t.items()}, "worst_err": errs})
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(worker(smoke="--cpu-smoke" in sys.argv)))
        return
    p = harness.bench_parser(__doc__, "bench_norm_cpu")
    args = p.parse_args()
    ik = harness.load_kernel()
    best = ik.ops.cpu_isa()
    results = {}
    for isa in ISAS[:ISAS.index(best) + 1]:
        cmd = [sys.executable, __file__, "--worker"] + (["--cpu-smoke"] if args.cpu_smoke else [])
        proc = subprocess.run(cmd, env={**os.environ, "IK_CPU_ISA": isa}, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"worker {isa} failed:\n{proc.stderr[-3000:]}")
        results[isa] = json.loads(proc.stdout.strip().splitlines()[-1])
    md = harness.out_dir() / f"{args.name}.md"
    md.write_text(f"# CPU norms and SwiGLU per instruction set\n\n{os.cpu_count()} threads, torch {torch.__version__}, "
                  f"best instruction set here: {best}\n")
    _, copy_bw = bandwidth(1 << 20 if args.cpu_smoke else 1 << 30)
    with md.open("a") as f:
        f.write(f"copy bandwidth (read + write): {copy_bw:.1f} GB/s\n")
    print(f"copy bandwidth (read + write): {copy_bw:.1f} GB/s")
    moved = {"rms_norm": 2, "fused_add_rms_norm": 4, "layer_norm": 2, "silu_mul": 3}  # row-sized tensors
    isas = list(results)
    anchors = {"rms_norm": "HF eager", "fused_add_rms_norm": "HF eager", "layer_norm": "F.layer_norm",
               "silu_mul": "F.silu(g) * u"}
    for op, anchor in anchors.items():
        rows = []
        for i, pt in enumerate(results[isas[0]]):
            hf = [results[isa][i]["us"][f"{op} (ref)"] for isa in isas]
            ours = [results[isa][i]["us"][op] for isa in isas]
            errs = max(results[isa][i]["worst_err"][op] for isa in isas)
            floor_us = moved[op] * pt["rows"] * pt["hidden"] * DTYPES[pt["dtype"]].itemsize / copy_bw / 1e3
            rows.append([pt["dtype"], f"{pt['rows']} x {pt['hidden']}", f"{min(hf):.1f}"]
                        + [f"{u:.1f}" for u in ours] + [f"{min(hf) / ours[-1]:.2f}x",
                                                       f"{100 * floor_us / ours[-1]:.0f}%", f"{errs:.1e}"])
        harness.print_table(["dtype", "rows x hidden", f"{anchor} us (best)"] + [f"ours {isa} us" for isa in isas]
                            + [f"{anchor} / ours {isas[-1]}", f"% floor ({isas[-1]})", "worst err (all sets)"], rows,
                            f"{op}, CPU, wall clock", md)
    (harness.out_dir() / f"{args.name}.json").write_text(json.dumps({"copy_bw_gbs": copy_bw, "results": results},
                                                                    indent=1))
    print(f"wrote {md}")


if __name__ == "__main__":
    main()
