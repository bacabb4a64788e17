"""One line per (weight, rows) of a bench_skinny_gemm.py --tune result: us for each config.

python3 scripts/tune_summary.py RESULT.json
"""
import json
import sys
from collections import defaultdict


def main(path: str) -> None:
    rows = defaultdict(list)
    for r in json.load(open(path))["results"]:
        if r["op"] == "skinny_gemm_fp8_tune":
            us = "-" if r["us"] is None else f"{r['us']:.2f}"
            rows[(r["N"], r["K"], r["M"])].append((str(r["config"] or "auto"), us))
    for (n, k, m), cells in rows.items():
        print(f"{n}x{k} M{m}: " + "  ".join(f"{c}={us}" for c, us in cells))


if __name__ == "__main__":
    main(sys.argv[1])
