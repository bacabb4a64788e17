"""Latency versus rows, one panel per table, from the markdown the benchmarks write.

    python benchmarks/plot.py benchmarks/results/2026-11-29-h200-*.md -o benchmarks/results/latency.png

Reads every `### title` table whose columns include `rows` and `<impl> us` (the format
of harness.print_table), and draws each implementation and the copy-bandwidth floor on
log-log axes. Only recorded numbers are drawn.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path


def parse_tables(text: str):
    """Yields (title, {impl: [(rows, us)]}) for each table with rows and *us columns."""
    title, header, series = None, None, None
    for line in text.splitlines() + [""]:
        if line.startswith("### "):
            title, header, series = line[4:].strip(), None, None
        elif line.startswith("|") and title:
            cells = [c.strip() for c in line.strip("|").split("|")]
            if header is None:
                header = cells
                series = {h[:-3]: [] for h in header if h.endswith(" us")}
            elif not set(cells[0]) <= set("-:") and "rows" in header:
                rows = int(cells[header.index("rows")])
                for name in series:
                    value = cells[header.index(f"{name} us")].rstrip("*")
                    if value not in ("-", ""):
                        series[name].append((rows, float(value)))
        elif header is not None and series and "rows" in header:
            yield title, series
            title, header, series = None, None, None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tables", nargs="+", type=Path)
    p.add_argument("-o", "--out", type=Path, required=True)
    args = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [t for path in args.tables for t in parse_tables(path.read_text())]
    cols = 3
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.8 * nrows), squeeze=False)
    for ax, (title, series) in zip(axes.flat, panels):
        for name, points in series.items():
            if points:
                xs, ys = zip(*points)
                style = {"linestyle": ":", "color": "gray"} if name == "floor" else {"marker": "o"}
                ax.plot(xs, ys, label=name, **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(re.sub(r"\s+", " ", title), fontsize=9)
        ax.set_xlabel("rows")
        ax.set_ylabel("us (median, CUDA graph)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out} ({len(panels)} panels)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
