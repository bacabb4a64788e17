"""Device time of each kernel of the decode MLP chain (bench_skinny_gemm.py's: rms_norm_fp8
-> gate_up [13312, 16384] -> silu_and_mul_fp8 -> down [16384, 6656], fp16), and of the
gate_up GEMM alone, under torch.profiler, with convert 5 off and on (IK_SKINNY_GEMM_RING,
read at each launch). Eager launches over 8 rotated weight copies: the device times are the
kernels' own, whatever the host's gaps.

    python3 benchmarks/profile_mlp_chain.py [M ...]      # default M 17 and 32
    python3 benchmarks/profile_mlp_chain.py --state [M ...]
    python3 benchmarks/profile_mlp_chain.py --pair CONVERT M   # for Nsight Compute

--pair launches 8 times the gate_up GEMM at the given convert (0: the default) followed by
the down GEMM at the default, without the profiler, for Nsight Compute to read a pair.

--state asks why the down projection runs slower after convert 5: it times each kernel of
gate_up (convert 1, 4 or 5), a 4096 x 4096 GEMM (convert 5 or the default) or a decode
attention (SDPA, 32 heads, 4096 keys) followed by the down GEMM (convert 1, 4 or 5), a
20 us spin kernel, or a 109 MB copy, and samples the SM clock, power and clock-event
reasons (nvidia-smi, every 20 ms) while each pair loops for 1 s without the profiler.
"""

import os
import statistics
import subprocess
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

FP8 = torch.float8_e4m3fn


def cuda_events(fn, copies, reps):
    """The CUDA kernel events of reps x copies calls of fn (after one warm pass)."""
    for i in range(copies):
        fn(i)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            for i in range(copies):
                fn(i)
        torch.cuda.synchronize()
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def kernel_times(fn, copies, reps=2):
    """Device us a call per kernel name (first 60 characters), and launches a call."""
    times = {}
    for e in cuda_events(fn, copies, reps):
        t = times.setdefault(e.name[:60], [0.0, 0])
        t[0] += e.device_time
        t[1] += 1
    return {k: (us / (reps * copies), n // (reps * copies)) for k, (us, n) in times.items()}


def sampled_clocks(fn, copies, seconds=2.0):
    """Median SM clock (MHz), power (W) and the clock-event reasons seen while fn loops."""
    cmd = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_event_reasons.active",
           "--format=csv,noheader,nounits", "-lms", "20"]
    try:
        smi = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    except OSError:
        return "no nvidia-smi"
    end = time.time() + seconds
    calls = 0
    while time.time() < end:
        for i in range(copies):
            fn(i)
        calls += copies
        if calls % (copies * 16) == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    smi.terminate()
    rows = [r.split(",") for r in smi.communicate()[0].strip().splitlines() if r.count(",") == 2]
    try:
        sm = statistics.median(float(r[0]) for r in rows)
        pw = statistics.median(float(r[1]) for r in rows)
    except (ValueError, statistics.StatisticsError):
        return f"unparsed: {rows[:2]}"
    reasons = sorted({r[2].strip() for r in rows})
    return f"SM {sm:.0f} MHz, {pw:.0f} W, reasons {reasons} ({len(rows)} samples)"


def kernel_sequence(fn, copies, reps=2):
    """Device us of each kernel of a call, in launch order: [(name, us)]."""
    ev = sorted(cuda_events(fn, copies, reps), key=lambda e: e.time_range.start)
    per = len(ev) // (reps * copies)
    out = []
    for j in range(per):
        us = [ev[c * per + j].device_time for c in range(reps * copies)]
        out.append((ev[j].name.split("::")[-1][:30], statistics.median(us)))
    return out


def state(k, ms):
    """Which gate_up kernels slow the down GEMM after them, and which down kernels suffer."""
    hidden, inter, dev, dtype, copies = 16384, 6656, "cuda", torch.float16, 8
    s1, s2 = torch.tensor([0.02], device=dev), torch.tensor([0.002], device=dev)
    sw = torch.tensor([0.02 / 16], device=dev)
    wgu = [(torch.randn(2 * inter, hidden, device=dev) * 3).to(FP8) for _ in range(copies)]
    wd = [(torch.randn(hidden, inter, device=dev) * 3).to(FP8) for _ in range(copies)]
    big = [torch.empty(hidden * inter, dtype=torch.uint8, device=dev) for _ in range(2)]
    wsq = [(torch.randn(4096, 4096, device=dev) * 3).to(FP8) for _ in range(copies)]
    kv = [torch.randn(1, 32, 4096, 128, device=dev, dtype=dtype) for _ in range(2)]
    spin = 40000  # cycles: about 20 us at the H200's 1980 MHz
    os.environ["IK_SKINNY_GEMM_RING"] = "0"
    for m in ms:
        q1 = (torch.randn(m, hidden, device=dev) * 20).to(FP8)
        q2 = (torch.randn(m, inter, device=dev) * 20).to(FP8)
        o1 = torch.empty(m, 2 * inter, device=dev, dtype=dtype)
        o2 = torch.empty(m, hidden, device=dev, dtype=dtype)
        q3 = (torch.randn(m, 4096, device=dev) * 20).to(FP8)
        o3 = torch.empty(m, 4096, device=dev, dtype=dtype)
        qa = torch.randn(1, 32, 1, 128, device=dev, dtype=dtype)
        for up_cfg, after in (([], "down"), ([0, 0, 0, 5], "down"), ([0, 0, 0, 4], "down"),
                              ([0, 0, 0, 5], "spin, down"), ([], "down [0, 0, 0, 4]"),
                              ([0, 0, 0, 5], "down [0, 0, 0, 4]"), ([0, 0, 0, 5], "down [0, 0, 0, 5]"),
                              ([], "copy"), ([0, 0, 0, 5], "copy"), (None, "down"),
                              ("4096 x 4096 at convert 5", "down"), ("4096 x 4096 at the default", "down"),
                              ("decode attention", "down")):
            def fn(i, up_cfg=up_cfg, after=after):
                if isinstance(up_cfg, list):
                    k.ops.skinny_gemm_fp8(o1, q1, wgu[i], s1, sw, None, up_cfg)
                elif up_cfg and up_cfg.startswith("4096"):  # a short GEMM before the down
                    k.ops.skinny_gemm_fp8(o3, q3, wsq[i], s1, sw, None, [0, 0, 0, 5] if "5" in up_cfg else [])
                elif up_cfg:  # flash attention of one query token over 4096 cached ones
                    torch.nn.functional.scaled_dot_product_attention(qa, kv[i % 2], kv[i % 2])
                if after == "copy":
                    big[1].copy_(big[0])
                    return
                if after.startswith("spin"):
                    torch.cuda._sleep(spin)
                cfg = [int(v) for v in after[after.index("[") + 1:-1].split(",")] if "[" in after else []
                k.ops.skinny_gemm_fp8(o2, q2, wd[i], s2, sw, None, cfg)

            try:
                seq = kernel_sequence(fn, copies)
            except RuntimeError as e:  # a config these operands cannot take
                print(f"M {m}, gate_up {up_cfg}, then {after}: {str(e).splitlines()[0][:80]}")
                continue
            line = ", ".join(f"{name} {us:.2f}" for name, us in seq)
            print(f"M {m}, gate_up {up_cfg if up_cfg is not None else 'none'}, then {after}: {line}")
            print(f"    {sampled_clocks(fn, copies, 1.0)}")


def pair(k, convert, m):
    hidden, inter, dev, dtype = 16384, 6656, "cuda", torch.float16
    s1, s2 = torch.tensor([0.02], device=dev), torch.tensor([0.002], device=dev)
    sw = torch.tensor([0.02 / 16], device=dev)
    wgu = [(torch.randn(2 * inter, hidden, device=dev) * 3).to(FP8) for _ in range(2)]
    wd = [(torch.randn(hidden, inter, device=dev) * 3).to(FP8) for _ in range(2)]
    q1 = (torch.randn(m, hidden, device=dev) * 20).to(FP8)
    q2 = (torch.randn(m, inter, device=dev) * 20).to(FP8)
    o1 = torch.empty(m, 2 * inter, device=dev, dtype=dtype)
    o2 = torch.empty(m, hidden, device=dev, dtype=dtype)
    up_cfg = [0, 0, 0, convert] if convert else []
    for i in range(8):
        k.ops.skinny_gemm_fp8(o1, q1, wgu[i % 2], s1, sw, None, up_cfg)
        k.ops.skinny_gemm_fp8(o2, q2, wd[i % 2], s2, sw, None, [])
    torch.cuda.synchronize()


def main() -> int:
    if not torch.cuda.is_available():
        print("profile_mlp_chain: no CUDA device")
        return 0
    k = harness.load_kernel()
    args = sys.argv[1:]
    if args and args[0] == "--pair":
        pair(k, int(args[1]), int(args[2]))
        return 0
    if args and args[0] == "--state":
        state(k, [int(v) for v in args[1:]] or [17, 32])
        return 0
    hidden, inter, dev, dtype, copies = 16384, 6656, "cuda", torch.float16, 8
    w_norm = (1 + 0.1 * torch.randn(hidden, device=dev)).to(dtype)
    s1, s2 = torch.tensor([0.02], device=dev), torch.tensor([0.002], device=dev)
    sw = torch.tensor([0.02 / 16], device=dev)
    wgu = [(torch.randn(2 * inter, hidden, device=dev) * 3).to(FP8) for _ in range(copies)]
    wd = [(torch.randn(hidden, inter, device=dev) * 3).to(FP8) for _ in range(copies)]
    for m in [int(v) for v in args] or [17, 32]:
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
