"""Device time of each kernel of the decode MLP chain (bench_skinny_gemm.py's: rms_norm_fp8
-> gate_up [13312, 16384] -> silu_and_mul_fp8 -> down [16384, 6656], fp16), and of the
gate_up GEMM alone, under torch.profiler, with convert 5 off and on (IK_SKINNY_GEMM_RING,
read at each launch). Eager launches over 8 rotated weight copies: the device times are the
kernels' own, whatever the host's gaps.

    python3 benchmarks/profile_mlp_chain.py [M ...]      # default M 17 and 32
"""

import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

FP8 = torch.float8_e4m3fn


def kernel_times(fn, copies, reps=2):
    """Device us a call per kernel name (first 60 characters), and launches a call."""
    for i in range(copies):
        fn(i)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            for i in range(copies):
                fn(i)
        torch.cuda.synchronize()
    times = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            t = times.setdefault(e.name[:60], [0.0, 0])
            t[0] += e.device_time
            t[1] += 1
    return {k: (us / (reps * copies), n // (reps * copies)) for k, (us, n) in times.items()}


def main() -> int:
    if not torch.cuda.is_available():
        print("profile_mlp_chain: no CUDA device")
        return 0
    k = harness.load_kernel()
    hidden, inter, dev, dtype, copies = 16384, 6656, "cuda", torch.float16, 8
    w_norm = (1 + 0.1 * torch.randn(hidden, device=dev)).to(dtype)
    s1, s2 = torch.tensor([0.02], device=dev), torch.tensor([0.002], device=dev)
    sw = torch.tensor([0.02 / 16], device=dev)
    wgu = [(torch.randn(2 * inter, hidden, device=dev) * 3).to(FP8) for _ in range(copies)]
    wd = [(torch.randn(hidden, inter, device=dev) * 3).to(FP8) for _ in range(copies)]
    for m in [int(v) for v in sys.argv[1:]] or [17, 32]:
        x = torch.randn(m, hidden, device=dev, dtype=dtype)
        q1 = k.rms_norm_fp8(x, w_norm, s1, 1e-6)

        def chain(i):
            h = k.skinny_gemm_fp8(k.rms_norm_fp8(x, w_norm, s1, 1e-6), wgu[i], s1, sw, out_dtype=dtype)
            return k.skinny_gemm_fp8(k.silu_and_mul_fp8(h, s2), wd[i], s2, sw, out_dtype=dtype)

        for ring in ("0", "1"):
            os.environ["IK_SKINNY_GEMM_RING"] = ring
            for label, fn in (("chain", chain),
                              ("gate_up alone", lambda i: k.skinny_gemm_fp8(q1, wgu[i], s1, sw, out_dtype=dtype))):
                times = kernel_times(fn, copies)
                total = sum(us for us, _ in times.values())
                print(f"M {m}, IK_SKINNY_GEMM_RING={ring}, {label}: {total:.1f} us a call")
                for name, (us, n) in sorted(times.items(), key=lambda kv: -kv[1][0]):
                    print(f"    {us:8.2f} us x {n}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
