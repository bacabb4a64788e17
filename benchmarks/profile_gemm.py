"""One skinny_gemm_fp8 (or torch._scaled_mm) launch shape, run a few times inside a
cudaProfilerStart/Stop region, for Nsight Compute (where the warps stall, which pipes
are busy, issue and memory throughput):

    ncu --profile-from-start off --clock-control none --kernel-name regex:skinny_gemm \\
        --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats \\
        python3 benchmarks/profile_gemm.py ours 13312 16384 32 [tiles_per_block warps cluster convert]

impl: `ours` (skinny_gemm_fp8 through the op, optional work-split config) or `scaled_mm`
(torch._scaled_mm, per-tensor scales, bf16 out). Nsight Compute flushes the caches before
each profiled kernel by default, so one weight copy is read from DRAM as in the benchmark.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402


def main() -> int:
    impl, n, k, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    config = [int(v) for v in sys.argv[5:]]
    a = (torch.randn(m, k, device="cuda") * 3).clamp(-448, 448).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") * 3).clamp(-448, 448).to(torch.float8_e4m3fn)
    sa, sb = torch.tensor(0.02, device="cuda"), torch.tensor(0.01, device="cuda")
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    if impl == "ours":
        ik = harness.load_kernel()
        run = lambda: ik.ops.skinny_gemm_fp8(out, a, b, sa.reshape(1), sb.reshape(1), None, config)  # noqa: E731
    elif impl == "scaled_mm":
        run = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)  # noqa: E731
    else:
        raise SystemExit(f"impl must be ours or scaled_mm, got {impl}")
    run()  # module load, workspace allocations, cuBLASLt heuristics: outside the region
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _ in range(6):
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
