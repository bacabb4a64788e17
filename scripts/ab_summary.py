"""A/B table of bench_q4k.py runs: us of `ours` per (format, N x K, M), one column a run.

    python3 scripts/ab_summary.py DIR NAME RUN RUN ...   # reads DIR/NAME_RUN.json
"""
import json
import sys
from pathlib import Path


def main(argv):
    out, name, runs = Path(argv[0]), argv[1], argv[2:]
    table, keys = {}, []
    for run in runs:
        f = out / f"{name}_{run}.json"
        if not f.exists():
            continue
        for r in json.loads(f.read_text())["rows"]:
            key = (r["fmt"], f"{r['n']}x{r['k']}", r["m"])
            if key not in table:
                keys.append(key)
            table.setdefault(key, {})[run] = r["us"].get("ours")
    print("fmt  NxK  m  " + "  ".join(runs))
    for key in keys:
        cells = [f"{table[key][r]:.2f}" if table[key].get(r) else "-" for r in runs]
        print(f"{key[0]} {key[1]} m={key[2]}  " + "  ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:])
