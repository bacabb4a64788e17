"""What a plain read of N bytes costs on this GPU, timed the way the benchmarks time
our kernels: the achievable floor for a weight-streaming kernel of that size.

The benchmarks' "% BW" divides the bytes by the copy bandwidth of a 2 GiB copy. A
kernel that reads 33 MB once cannot reach it: the grid ramps up and drains, and in a
graph of back-to-back calls each call pays its own start and tail. This script reads
exactly the weight bytes of each benchmark shape with the simplest streaming kernel
(Triton: each program sums BLOCK x ITERS int32 words, loads skipping L1; the best of
a few shapes is kept), over the same rotating copies (harness.time_us), so "ours /
read" in BENCHMARKS.md says how far a kernel is from what reading alone costs.
A device copy (torch) of the norm benchmarks' sizes gives the same for kernels that
read and write once.

    python benchmarks/read_floor.py          # on the GPU; writes read_floor.md to $OUT
    python benchmarks/read_floor.py --cpu-smoke   # the script's path on tiny sizes (torch.sum, no Triton)
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

# (what, bytes): the weight bytes of bench_q4k.py's and bench_skinny_gemm.py's shapes.
READS = [
    ("Q4_K 4096x4096", 4096 * 4096 // 256 * 144),
    ("Q4_K 14336x4096 (and 4096x14336)", 14336 * 4096 // 256 * 144),
    ("Q6_K 14336x4096", 14336 * 4096 // 256 * 210),
    ("Q4_K 128256x4096", 128256 * 4096 // 256 * 144),
    ("Q6_K 128256x4096", 128256 * 4096 // 256 * 210),
    ("FP8 2304x16384", 2304 * 16384),
    ("FP8 16384x6656", 16384 * 6656),
    ("FP8 13312x16384", 13312 * 16384),
]
# (what, bytes read = bytes written): the norm benchmarks' 16-bit tensors.
COPIES = [
    ("fp16 4096x4096 (and 16384x1024)", 4096 * 4096 * 2),
    ("fp16 2048x16384", 2048 * 16384 * 2),
]
CONFIGS = [(block, iters, warps) for block in (1024, 4096) for iters in (1, 4) for warps in (4, 8)]


def make_read_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def read_kernel(src, out, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):
        pid = tl.program_id(0)
        base = pid.to(tl.int64) * BLOCK * ITERS
        acc = tl.zeros([BLOCK], dtype=tl.int32)
        for i in tl.static_range(ITERS):
            offs = base + i * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(src + offs, mask=offs < n, other=0, cache_modifier=".cg")
        tl.store(out + pid, tl.sum(acc))

    def run(src, out, cfg):
        block, iters, warps = cfg
        n = src.numel()
        grid = (triton.cdiv(n, block * iters),)
        read_kernel[grid](src, out, n, BLOCK=block, ITERS=iters, num_warps=warps)

    return run


def main(argv=None) -> int:
    p = harness.bench_parser(__doc__, "read_floor")
    args = p.parse_args(argv)
    dev = harness.bench_device(args.cpu_smoke, "read_floor")
    if dev is None:
        return 0
    reads, copies_list, configs = READS, COPIES, CONFIGS
    if dev == "cpu":  # the script's path only: tiny sizes, torch.sum for the read kernel
        reads, copies_list, configs = [("smoke", 1 << 16)], [("smoke", 1 << 16)], [None]

        def run(src, out, cfg):
            torch.sum(src, 0, dtype=torch.int32, out=out[0])
    else:
        run = make_read_kernel()
    bw = harness.copy_bandwidth(device=dev)
    md = harness.out_dir() / f"{args.name}.md"
    name = torch.cuda.get_device_name() if dev == "cuda" else "CPU smoke run"
    md.write_text(f"# {args.name}\n\n{name}; copy bandwidth (2 GiB) "
                  f"{bw / 1e12:.3f} TB/s; medians of CUDA-graph replays over rotating copies.\n")
    rows = []
    for what, nbytes in reads:
        copies = max(8, harness.rotations_for(nbytes))
        srcs = [torch.randint(0, 1 << 30, (nbytes // 4,), dtype=torch.int32, device=dev) for _ in range(copies)]
        out = torch.empty(nbytes // 4 // 1024 + 1, dtype=torch.int32, device=dev)
        best = None
        for cfg in configs:
            t = harness.time_us(lambda i, c=cfg: run(srcs[i], out, c), copies, device=dev)
            if best is None or t.us < best[0]:
                best = (t.us, f"{cfg[0]}x{cfg[1]}, {cfg[2]} warps" if cfg else "torch.sum")
        floor = nbytes / bw * 1e6
        rows.append([what, nbytes / 1e6, copies, best[0], nbytes / best[0] / 1e6, floor,
                     f"{100 * floor / best[0]:.0f}%", best[1]])
        print(f"  read {what}: {best[0]:.2f} us ({best[1]})", flush=True)
        del srcs
    harness.print_table(["read", "MB", "copies", "best read us", "TB/s", "floor us (2 GiB copy BW)",
                         "floor / read", "kernel"], rows, "Plain read of the weight bytes", md)
    rows = []
    for what, nbytes in copies_list:
        copies = max(8, harness.rotations_for(2 * nbytes))
        srcs = [torch.empty(nbytes, dtype=torch.uint8, device=dev).fill_(1) for _ in range(copies)]
        dsts = [torch.empty_like(s) for s in srcs]
        t = harness.time_us(lambda i: dsts[i].copy_(srcs[i]), copies, device=dev)
        floor = 2 * nbytes / bw * 1e6
        rows.append([what, nbytes / 1e6, copies, t.us, 2 * nbytes / t.us / 1e6, floor, f"{100 * floor / t.us:.0f}%"])
        print(f"  copy {what}: {t.us:.2f} us", flush=True)
        del srcs, dsts
    harness.print_table(["copy", "MB each way", "copies", "copy us", "TB/s", "floor us (2 GiB copy BW)",
                         "floor / copy"], rows, "Device copy (read once, write once)", md)
    print(f"\nwrote {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
