"""One q4k_gemv / q6k_gemv launch shape, run a few times for Nsight Compute to profile
(where the warps stall, issue and memory throughput):

    ncu --kernel-name regex:kquant --launch-skip 3 --launch-count 1 \\
        --section WarpStateStats --section SchedulerStats --section SpeedOfLight \\
        python3 benchmarks/profile_q4k.py Q4_K 14336 4096 1 [tiled] [fp16]

"tiled": the weight in the tiled layout (tile_q4k / tile_q6k); "fp16": fp16 x (default bf16).
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

BYTES = {"Q4_K": 144, "Q6_K": 210}


def main() -> int:
    fmt, n, k, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    tiled, dtype = "tiled" in sys.argv[5:], torch.float16 if "fp16" in sys.argv[5:] else torch.bfloat16
    ik = harness.load_kernel()
    nb = k // 256
    q = torch.randint(0, 256, (n, nb, BYTES[fmt]), dtype=torch.uint8, device="cuda")
    at = 0 if fmt == "Q4_K" else 208
    q[..., at:at + 2] = 0x10  # small finite fp16 d (and dmin for Q4_K)
    if fmt == "Q4_K":
        q[..., 2:4] = 0x10
    q = q.reshape(n, nb * BYTES[fmt])
    if tiled:
        q = ik.tile_q4k(q) if fmt == "Q4_K" else ik.tile_q6k(q)
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    op = ik.q4k_gemv if fmt == "Q4_K" else ik.q6k_gemv
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()  # for ncu --profile-from-start off
    for _ in range(6):
        op(x, q, n) if tiled else op(x, q)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
