"""torch.compile's silu_and_mul_fp8 (bench_swiglu.py's `compile_scale`) alone: its time at
decode rows, and its Triton kernels' SASS, for reading beside ours (tune_norms times ours).

    TRITON_CACHE_DIR=$OUT/tc TORCH_LOGS=output_code python3 benchmarks/compiled_swiglu.py --rows 1 8 32
    # then: cuobjdump -sass $OUT/tc/*/*.cubin

No package needed. Times are medians of CUDA-graph replays over rotated input copies, as in
bench_swiglu.py (harness.time_us).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from bench_swiglu import silu_and_mul_fp8_eager  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--d", type=int, default=6656)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("compiled_swiglu: no GPU, nothing to do")
        return 0
    torch._dynamo.config.cache_size_limit = 64
    scale = torch.tensor([0.02], device="cuda")
    fn = torch.compile(lambda x: silu_and_mul_fp8_eager(x, 1.0 / scale), dynamic=False)
    for n in args.rows:
        x = torch.randn(n, 2 * args.d, device="cuda", dtype=torch.float16)
        n_rot = harness.rotations_for(x.numel() * 2)
        xs = [x.clone() for _ in range(n_rot)]
        t = harness.time_us(lambda i, xs=xs: fn(xs[i]), n_rot)
        print(f"compile_scale silu_and_mul_fp8 fp16 {n}x{2 * args.d}: {t.us:.3f} us ({t.method}, {n_rot} copies)")
        del xs
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
