"""Runs every CUDA kernel of the package at odd sizes, for compute-sanitizer.

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck python3 scripts/sanitize_cuda.py
    ... scripts/sanitize_cuda.py --only-kquants   # q4k_gemv / q6k_gemv alone
    ... scripts/sanitize_cuda.py --only-layernorm  # layer_norm alone
    ... scripts/sanitize_cuda.py --only-rmsnorm    # the RMSNorm ops alone, piped layouts included
    ... scripts/sanitize_cuda.py --only-activations  # SwiGLU and silu alone, every vector width
    ... python3 scripts/sanitize_cuda.py skinny_gemm    # only the FP8 GEMM's launches
    ... python3 scripts/sanitize_cuda.py skinny_gemm_rows  # only its convert 7 (M <= 2) and 8 (M = 1)

Without the caching allocator every tensor is its own allocation, so an
out-of-bounds access is caught instead of landing in a neighbour's block.
"""

import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LOCAL_KERNELS", f"inference-kernels/inference-kernels={ROOT / 'build'}")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import kernels  # noqa: E402


def activations(ik, rows, hidden, dtype, dev):
    """silu_and_mul(_fp8), silu_mul and silu: the widest vector the size picks (aligned,
    when hidden allows), the 4-byte one (views two elements in, 16-bit dtypes) and the
    one-element path (views one element in). Returns the launch count."""
    scale = torch.tensor([0.05], device=dev)
    x = torch.randn(rows, 2 * hidden, device=dev, dtype=dtype)
    gate = torch.randn(rows, hidden, device=dev, dtype=dtype)
    up = torch.randn(rows, hidden, device=dev, dtype=dtype)
    ik.silu_and_mul(x)
    ik.silu_and_mul_fp8(x, scale)
    ik.silu_mul(gate, up)
    ik.silu(gate)
    wide = torch.randn(rows, 2 * hidden + 1, device=dev, dtype=dtype)
    up_wide = torch.randn(rows, hidden + 1, device=dev, dtype=dtype)
    out8 = torch.empty(rows, hidden + 1, device=dev, dtype=torch.float8_e4m3fn)
    ik.silu_and_mul(wide[:, 1:])
    ik.silu_and_mul_fp8(wide[:, 1:], scale, out=out8[:, 1:])
    ik.silu_mul(gate, up_wide[:, 1:])
    ik.silu(up_wide[:, 1:])
    # 2^126: past the reciprocal's fast path (its fix-up runs)
    ik.silu_and_mul_fp8(x, torch.tensor([2.0 ** 126], device=dev))
    if hidden < 2:
        return 9
    wide2 = torch.randn(rows, 2 * hidden + 2, device=dev, dtype=dtype)
    ik.silu_and_mul_fp8(wide2[:, 2:], scale, out=torch.empty(rows, hidden + 2, device=dev,
                                                             dtype=torch.float8_e4m3fn)[:, 2:])
    ik.silu_mul(wide2[:, 2:hidden + 2], wide2[:, hidden + 2:])
    return 11


def norm_cases(shapes, dev):
    """For each dtype and (rows, hidden): x, a weight, and a buffer one column wider than x
    (its [:, 1:] view is misaligned: the scalar path)."""
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for rows, hidden in shapes:
            yield (torch.randn(rows, hidden, device=dev, dtype=dtype), torch.randn(hidden, device=dev, dtype=dtype),
                   torch.randn(rows, hidden + 1, device=dev, dtype=dtype))


def rms_norms(ik, x, w, wide):
    """Every RMSNorm op: alone, with the residual, with static and dynamic fp8 (with and
    without the residual), aligned and on a misaligned view (the scalar path). Returns
    the launch count."""
    ik.rms_norm(x, w, 1e-6)
    ik.fused_add_rms_norm(x, torch.randn_like(x), w, 1e-6)
    ik.rms_norm(wide[:, 1:], w, 1e-6)
    scale = torch.tensor([0.05], device=x.device)
    ik.rms_norm_fp8(x, w, scale, 1e-6, residual=torch.randn_like(x))
    ik.rms_norm_fp8(x, w, scale, 1e-6)
    ik.rms_norm_fp8(wide[:, 1:], w, scale, 1e-6)
    ik.rms_norm_fp8_dynamic(x, w, 1e-6, residual=torch.randn_like(x))
    ik.rms_norm_fp8_dynamic(x, w, 1e-6)
    ik.rms_norm_fp8_dynamic(wide[:, 1:], w, 1e-6)
    return 9


def layer_norms(ik, x, w, wide):
    """layer_norm with and without weight/bias, in place, on a misaligned view (the
    scalar path) and on a row long enough to stream (no register cache)."""
    ik.layer_norm(x, w, torch.randn_like(w), 1e-5)
    ik.layer_norm(x, None, None, 1e-5)
    ik.layer_norm(x, w, None, 1e-5, out=x)
    ik.layer_norm(wide[:, 1:], w, w, 1e-5)
    long = torch.randn(2, 40000, device=x.device, dtype=x.dtype)
    ik.layer_norm(long, None, torch.randn(40000, device=x.device, dtype=x.dtype), 1e-5)
    return 5


def kquant_gemvs(ik, dev):
    """q4k_gemv / q6k_gemv at odd sizes: N = 1, 37 (8 warps split 17 blocks), 2051 and
    8195 and 17011 (partial last 16-row tiles; 17011 x 1280: more tiles than one wave holds,
    Q4_K's staged loop over 5 blocks), K of 1 block and 17 (Q6_K rows alternately 4-aligned
    and 2 mod 4), a Q6_K view starting 2 bytes into a word, a misaligned (copied) x, a
    strided fp16 x on tiled Q4_K, M from 1 to 8, every dtype; each also in the tiled
    layout. Random bytes with finite fp16 factors. Returns the launch count."""
    count = 0
    for fmt, size, op in (("Q4_K", 144, ik.ops.q4k_gemv), ("Q6_K", 210, ik.ops.q6k_gemv)):
        for n, k in [(1, 256), (37, 4352), (2051, 256), (8195, 256), (17011, 1280)]:
            nb = k // 256
            q = torch.randint(0, 256, (n, nb, size), dtype=torch.uint8, device=dev)
            q[..., (0 if fmt == "Q4_K" else 208):][..., :2] = 0x10  # small finite d
            if fmt == "Q4_K":
                q[..., 2:4] = 0x10
            q = q.reshape(n, nb * size)
            for dtype in (torch.float32, torch.float16, torch.bfloat16):
                for m in (1, 2, 3, 5, 8):
                    x = torch.randn(m, k, device=dev, dtype=dtype)
                    op(torch.empty(m, n, device=dev, dtype=dtype), x, q)
                    count += 1
                    # the tiled layout (zero rows pad the last tile)
                    op(torch.empty(m, n, device=dev, dtype=dtype), x, (ik.tile_q4k if fmt == "Q4_K" else ik.tile_q6k)(q))
                    count += 1
            wide = torch.randn(3, k + 1, device=dev)
            op(torch.empty(3, n, device=dev), wide[:, 1:], q)
            count += 1
            if fmt == "Q4_K":  # fp16 x rows a stride apart, read in place (tiled: into the stages)
                xs = torch.randn(2, k + 64, device=dev, dtype=torch.float16)[:, 32:32 + k]
                op(torch.empty(2, n, device=dev, dtype=torch.float16), xs, ik.tile_q4k(q))
                count += 1
            if fmt == "Q6_K" and n > 1 and nb % 2:
                op(torch.empty(2, n - 1, device=dev), torch.randn(2, k, device=dev), q[1:])
                count += 1
    return count


def skinny_gemms(ik, dev):
    """skinny_gemm_fp8 at odd sizes: every M slice (1-8, 9-16, 17-24, 25-32, > 32), odd N,
    K tails (a partial last chunk; K % 16 != 0, the byte path), a misaligned view, row
    strides, bias and per-channel scales, cluster and warp splits, each activation path
    (convert 1 and 2 per warp; 3, the f16 pre-pass with the cp.async weight ring, the
    default at M > 8 for weights under 64 MiB, also at M <= 8 and with K < 64, where only
    the partial chunk runs; 4, the fp8 warpgroup MMA, at M <= 32 (two groups of chunks
    in flight at M <= 16), one block and 8 a cluster; 5, the same MMAs in persistent clusters
    with the weights through a shared-memory ring, 3 and 4 slots, 8 a cluster: 37 tiles of
    2317 rows take three rounds of clusters; 6, the weight and activation copied by the
    tensor memory accelerator, clusters of 1, 3 and 8 and the launcher's, two consumer
    warpgroups a block at the launcher's split and 8, each epilogue forced: by element, by
    weight row at clusters of 1, 3 and 8, direct in persistent blocks, which take several
    tiles at 19237 rows, pushed rank to rank at clusters of 2, 3 and 8, and swapped between
    the two ranks of a cluster of 2).
    The op is called directly (no torch._scaled_mm route). Returns the launch count."""
    fp8 = torch.float8_e4m3fn
    n_launch = 0
    for m, n, k in [(1, 1, 16), (3, 17, 80), (8, 129, 1040), (9, 33, 4096), (17, 2317, 272),
                    (24, 77, 64 * 13 + 32), (32, 64, 6656 + 16), (33, 40, 128), (70, 19, 592),
                    (5, 23, 4099), (2, 7, 3), (13, 64 * 300 + 37, 144)]:
        a = (torch.randn(m, k + 32, device=dev) * 3).to(fp8)
        b = (torch.randn(n, k, device=dev) * 3).to(fp8)
        sa = torch.tensor([0.01], device=dev)
        sb = torch.rand(n, device=dev) / 64
        bias = torch.randn(n, device=dev).bfloat16()
        out = torch.empty(m, n + 3, device=dev, dtype=torch.bfloat16)
        wgmma = (([0, 0, 0, 4], [0, 0, 1, 4], [0, 0, 8, 4], [0, 2, 1, 4], [1, 2, 8, 4]) if m <= 16 else
                 ([0, 0, 0, 4], [0, 0, 8, 4], [1, 0, 8, 4]) if m <= 32 else ())
        ring = ([0, 0, 0, 5], [0, 3, 8, 5], [0, 4, 8, 5]) if m <= 32 else ()
        tma = (([0, 0, 0, 6], [0, 0, 1, 6], [0, 0, 3, 6], [0, 0, 8, 6], [2, 0, 0, 6], [2, 0, 8, 6], [0, 1, 1, 6],
                [0, 2, 1, 6], [0, 2, 3, 6], [2, 2, 1, 6], [1, 2, 8, 6], [0, 3, 0, 6], [2, 3, 1, 6], [0, 4, 0, 6], [0, 4, 3, 6], [2, 4, 2, 6], [1, 4, 8, 6],
                [0, 5, 2, 6], [2, 5, 2, 6])
               if m <= 32 else ())
        for cfg in ([], [1, 8, 4, 1], [2, 4, 2, 2], [1, 1, 8, 1], [1, 8, 4, 3], [2, 4, 2, 3],
                    [8, 1, 2, 3], [0, 0, 0, 3], *wgmma, *ring, *tma):
            ik.ops.skinny_gemm_fp8(out[:, :n], a[:, :k], b, sa, sb, bias, cfg)
            n_launch += 1
        ik.ops.skinny_gemm_fp8(out[:, 1:n + 1], a[:, 1:k + 1], b, sa, sb[:1], None)  # byte path
        ik.ops.skinny_gemm_fp8(out[:, :n].half(), a[:, :k], b, sa, sb[:1], bias.half())
        n_launch += 2
    return n_launch


def rows_gemms(ik, dev):
    """skinny_gemm_fp8's convert 7 (M = 1 and 2) and 8 (M = 1), whole weight rows a block
    (convert 7's persistent blocks where K is 8-16 KB): odd N (the last block's rows past N), K tails (segments past K, K = 16), several steps of K, 1, 2 and 4
    rows a block, 1, 2 and 4 segments a thread, f16 partial sums and fp32 ones, strided
    rows, a misaligned row stride of out, bias and per-channel scales. Returns the launch
    count."""
    import os
    fp8 = torch.float8_e4m3fn
    n_launch = 0
    for n, k in [(1, 16), (17, 80), (129, 1040), (2317, 272), (37, 6656 + 16), (1030, 8192 + 64), (5, 4096 * 5 + 48),
                 (2311, 16384), (3, 9008)]:  # the last two (and 8256): convert 7's persistent blocks
        a = (torch.randn(2, k + 32, device=dev) * 3).to(fp8)
        b = (torch.randn(n, k + 16, device=dev) * 3).to(fp8)[:, :k]
        sa = torch.tensor([0.01], device=dev)
        sb = torch.rand(n, device=dev) / 64
        bias = torch.randn(n, device=dev).bfloat16()
        out = torch.empty(2, n + 3, device=dev, dtype=torch.bfloat16)
        for f32 in ("0", "1"):
            os.environ["IK_SKINNY_GEMM_ROWS_F32"] = f32
            for m in (1, 2):  # convert 7 takes up to 2 rows of a
                for cfg in ([0, 0, 0, 7], [1, 1, 0, 7], [2, 2, 1, 7], [4, 4, 0, 7], [4, 1, 0, 7], [1, 4, 0, 7]):
                    ik.ops.skinny_gemm_fp8(out[:m, 1:n + 1], a[:m, :k], b, sa, sb, bias, cfg)
                    n_launch += 1
        os.environ.pop("IK_SKINNY_GEMM_ROWS_F32")
        if torch.cuda.get_device_capability()[0] == 9:  # convert 8: wgmma, whole rows a block
            for cfg in ([0, 0, 0, 8], [1, 2, 0, 8], [2, 1, 1, 8], [4, 2, 0, 8], [8, 1, 0, 8], [8, 2, 0, 8]):
                ik.ops.skinny_gemm_fp8(out[:1, 1:n + 1], a[:1, :k], b, sa, sb, bias, cfg)
                n_launch += 1
    return n_launch


def main():
    ik = kernels.get_kernel("inference-kernels/inference-kernels", version=1)
    dev = "cuda"
    if sys.argv[1:] == ["skinny_gemm_rows"]:
        n = rows_gemms(ik, dev)
        torch.cuda.synchronize()
        print(f"sanitize_cuda: {n} skinny_gemm_fp8 convert 7 and 8 launches done")
        return 0
    if sys.argv[1:] == ["skinny_gemm"]:
        n = skinny_gemms(ik, dev) + rows_gemms(ik, dev)
        torch.cuda.synchronize()
        print(f"sanitize_cuda: {n} skinny_gemm_fp8 launches done")
        return 0
    n = 0
    if "--only-kquants" in sys.argv:
        n = kquant_gemvs(ik, dev)
        torch.cuda.synchronize()
        print(f"sanitize_cuda: {n} k-quant gemv launches done")
        return 0
    if "--only-layernorm" in sys.argv:
        # The flat layouts past 132 rows (4 vectors a thread over an exact fit: 160 x 4 at
        # 5120, a warp at 1000), the 16-bit exact fits (flat: 64 threads x 2 at 1024, a warp
        # x 4 there at 4000 rows (layer_norm.cu's one_wave, on 132 SMs), a warp
        # to 512 threads x 4 at 2048 to 8192; the split rows at 5, 130, 170, 300, 400 and 673
        # x 16384 (bf16 to 1023 rows, fp16 to 2048), two rows a cluster at 1025 in bf16 and
        # 2049 in fp16)
        # and the others.
        for x, w, wide in norm_cases([(200, 5120), (300, 1000), (150, 1024), (4000, 1024), (140, 2048), (200, 4096),
                                      (140, 8192), (5, 16384), (130, 16384), (170, 16384), (300, 16384), (400, 16384), (673, 16384), (1025, 16384), (2049, 16384), (133, 2056),
                                      (1, 1), (5, 127), (33, 4096), (3, 16385), (2, 140000)], dev):
            n += layer_norms(ik, x, w, wide)
        torch.cuda.synchronize()
        print(f"sanitize_cuda: {n} layer_norm launches done")
        return 0
    if "--only-activations" in sys.argv:
        # Each vector tier (inputs up to 2 MB, 8 MB, beyond: 64, 320 and 700 rows of 2 x
        # 4104 16-bit), more rows than the lean kernel's grid (the general kernel), odd sizes.
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for rows, hidden in [(64, 4104), (320, 4104), (700, 4104), (65543, 72), (1, 1), (3, 3), (5, 127),
                                 (7, 6656), (3, 16385)]:
                n += activations(ik, rows, hidden, dtype, dev)
        torch.cuda.synchronize()
        print(f"sanitize_cuda: {n} SwiGLU / silu launches done")
        return 0
    if "--only-rmsnorm" in sys.argv:
        # The piped layouts (more than 256 rows of 513-2048 vectors), with more rows than
        # persistent blocks (2600 x 4104: about 3 rows a block) and the widest rows; the
        # exact fit at 16-bit 8192 and 16384 (fewer rows than blocks at 3 and 40, several
        # a block at 600); the flat exact fit at 16-bit 2048 to 8192 (3 and 200 rows; 300
        # with the residual streams at 4096; every fp8 mode at 8192) and at 1200 and 40 x
        # 16384 (1024 threads; 40 rows: static fp8 with the residual); the split rows at
        # 16384 (3, 40, 130 and 1200 rows: 8 blocks a row; 1200: 4 without the residual; the
        # dynamic fp8 scale at 3 and 40) and 8192 (3 and 40 rows, the dynamic scale too; 600
        # with the residual, 800 without; 1030: static fp8 too);
        # the other layouts at a few shapes.
        for x, w, wide in norm_cases([(2600, 4104), (1200, 16384), (130, 16384), (40, 16384), (3, 16384), (257, 8200), (300, 5000), (256, 8192),
                                      (3, 8192), (40, 8192), (600, 8192), (800, 8192), (1030, 8192), (3, 4096), (200, 4096), (300, 4096),
                                      (3, 2048), (200, 2048), (3, 16385), (300, 1000), (2, 140000)], dev):
            n += rms_norms(ik, x, w, wide)
        torch.cuda.synchronize()
        print(f"sanitize_cuda: {n} RMSNorm launches done")
        return 0
    if hasattr(ik.ops, "q4k_gemv"):
        n += kquant_gemvs(ik, dev)
    # The layouts of cuda_kernels/row_kernel.cuh too: warp per row (300 x 1000), cluster
    # over the scalar path (9 x 1030), streaming (2 x 140000), flat (33 and 200 x 4096,
    # 3 x 2056, 3 x 16385).
    for x, w, wide in norm_cases([(1, 1), (3, 3), (5, 127), (2, 5120), (3, 16385), (1, 16384), (33, 4096),
                                  (200, 4096), (3, 2056), (300, 1000), (9, 1030), (2, 140000)], dev):
        n += rms_norms(ik, x, w, wide)
        n += layer_norms(ik, x, w, wide)
        n += activations(ik, x.shape[0], x.shape[1], x.dtype, dev)
    n += skinny_gemms(ik, dev) + rows_gemms(ik, dev)
    torch.cuda.synchronize()
    print(f"sanitize_cuda: {n} launches done")


if __name__ == "__main__":
    sys.exit(main())
