"""rocm_kernels/q4k.hip's lane arithmetic, run on the CPU in numpy (no AMD GPU here).

The ROCm gemv differs from the CUDA one where results can change: Q4_K levels are
converted directly (no 16 + q mantissa offset, so no 16 * sum(x) subtracted back; high
nibbles are read as 16 q with the scale divided by 16), lanes take every 16th block
instead of every 8th, partial sums meet in a 64-lane butterfly, and K may be split over
2 or 4 waves added in order through LDS. This emulates exactly that: the kernel's word
and mask arithmetic on the block bytes (scale/min unpacking four at a time, Q6_K's
nibble and 2-bit assembly from the lane's 16-byte ranges), the per-lane fp32 FMA order
(fma as one rounding of the exact fp64 value), the butterfly and the split sum, and
checks it against the fp64 product with the CPU kernel's dequantisation, for every
dtype of x and each split.
"""

import pytest
import torch

from reference import TOL

np = pytest.importorskip("numpy")

BYTES = {"Q4_K": 144, "Q6_K": 210}
LANES, LANES_PER_BLOCK = 64, 4
BLOCKS_PER_STEP = LANES // LANES_PER_BLOCK


def f32(v):
    return np.asarray(v, dtype=np.float32)


def fma(a, b, c):
    """fp32 fused multiply-add: the exact fp64 product plus c, rounded once to fp32."""
    return f32(np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64))


def words(q, offset, count=4):
    """count little-endian uint32 words of every block, starting `offset` bytes in:
    what the kernel's aligned loads (and, for Q6_K, v_alignbit_b32) leave in registers."""
    b = q[..., offset:offset + 4 * count].astype(np.uint32)
    return [b[..., 4 * j] | b[..., 4 * j + 1] << 8 | b[..., 4 * j + 2] << 16 | b[..., 4 * j + 3] << 24
            for j in range(count)]


def half_bits(w):
    return (w & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32)


def lane_block_q4k(q, x, b, c, acc):
    """One lane (chunk c) on block b of every row: acc [N, M] updated in place order."""
    n, m = acc.shape
    head = words(q[:, b], 0)
    lo = words(q[:, b], 16 + 32 * c)
    hi = words(q[:, b], 32 + 32 * c)
    k0 = b * 256 + 64 * c
    s0, s1, s2 = head[1], head[2], head[3]
    if c < 2:
        scw, mnw = s0 & 0x3F3F3F3F, s1 & 0x3F3F3F3F
    else:
        scw = (s2 & 0x0F0F0F0F) | ((s0 >> 2) & 0x30303030)
        mnw = ((s2 >> 4) & 0x0F0F0F0F) | ((s1 >> 2) & 0x30303030)
    d, dmin = half_bits(head[0]), half_bits(head[0] >> 16)
    for half in range(2):
        mask = 0xF0F0F0F0 if half else 0x0F0F0F0F
        s = np.zeros((n, m), np.float32)
        xs = np.zeros(m, np.float32)
        for w in range(8):
            v = (lo if w < 4 else hi)[w % 4] & mask
            for i in range(4):
                f = f32((v >> (8 * i)) & 0xFF)[:, None]  # v_cvt_f32_ubyte<i>
                xv = x[:, k0 + 32 * half + 4 * w + i][None, :]
                xs = f32(xs + xv[0])
                s = fma(f, xv, s)
        at = 16 * (c & 1) + 8 * half
        ds = f32(f32(d * f32((scw >> at) & 0xFF)) * f32(0.0625 if half else 1.0))[:, None]
        dm = f32(dmin * f32((mnw >> at) & 0xFF))[:, None]
        acc = fma(ds, s, acc)
        acc = fma(-dm, xs[None, :], acc)
    return acc


def lane_block_q6k(q, x, b, lane, acc):
    h, g = (lane >> 1) & 1, lane & 1
    blk = q[:, b]
    qa = words(blk, 64 * h + 16 * g)
    qb = words(blk, 64 * h + 32 + 16 * g)
    qh = words(blk, 128 + 32 * h + 16 * g)
    sc = words(blk, 192 + 8 * h, 2)
    d = half_bits(blk[..., 208].astype(np.uint32) | blk[..., 209].astype(np.uint32) << 8)
    k0 = b * 256 + 128 * h + 16 * g
    n, m = acc.shape
    for s in range(4):
        sw = sc[0] if s < 2 else sc[1]
        byte = ((sw >> (8 * (g + 2 * (s % 2)))) & 0xFF).astype(np.uint8).view(np.int8)
        ds = f32(d * f32(byte))[:, None]
        part = np.zeros((n, m), np.float32)
        for w in range(4):
            l = (qb if s % 2 else qa)[w]
            lo4 = (l if s < 2 else l >> 4) & 0x0F0F0F0F
            hi2 = {0: qh[w] << 4, 1: qh[w] << 2, 2: qh[w], 3: qh[w] >> 2}[s]
            q6 = lo4 | (hi2 & 0x30303030)
            for i in range(4):
                f = f32(f32((q6 >> (8 * i)) & 0xFF) - f32(32.0))[:, None]
                part = fma(f, x[:, k0 + 32 * s + 4 * w + i][None, :], part)
        acc = fma(ds, part, acc)
    return acc


def emulate(q, x, fmt, split):
    """out [M, N] as the kernel computes it, for `split` waves per row group."""
    n, k = q.shape[0], x.shape[1]
    nb = k // 256
    q = q.reshape(n, nb, BYTES[fmt])
    m = x.shape[0]
    total = np.zeros((n, m), np.float32)
    for slice_ in range(split):
        lanes = np.zeros((LANES, n, m), np.float32)
        for lane in range(LANES):
            acc = np.zeros((n, m), np.float32)
            b = slice_ * BLOCKS_PER_STEP + lane // LANES_PER_BLOCK
            while b < nb:
                if fmt == "Q4_K":
                    acc = lane_block_q4k(q, x, b, lane % LANES_PER_BLOCK, acc)
                else:
                    acc = lane_block_q6k(q, x, b, lane, acc)
                b += BLOCKS_PER_STEP * split
            lanes[lane] = acc
        o = LANES // 2
        while o:  # wave_reduce: v += shfl_xor(v, o), o = 32 .. 1; every lane ends equal
            lanes = f32(lanes + lanes[np.arange(LANES) ^ o])
            o //= 2
        total = lanes[0] if slice_ == 0 else f32(total + lanes[0])
    return total.T


def random_blocks(n, nb, fmt, gen):
    q = torch.randint(0, 256, (n, nb, BYTES[fmt]), dtype=torch.uint8, generator=gen)
    d = (torch.rand(n, nb, 1, generator=gen) * 2e-3 + 1e-4).half().view(torch.uint8)
    if fmt == "Q4_K":
        q[..., 0:2] = d
        q[..., 2:4] = (torch.rand(n, nb, 1, generator=gen) * 2e-3).half().view(torch.uint8)
    else:
        q[..., 208:210] = d
    return q.reshape(n, nb * BYTES[fmt])


@pytest.mark.parametrize("fmt", ["Q4_K", "Q6_K"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("split", [1, 2, 4])
def test_rocm_lane_math_matches_fp64(ik, fmt, dtype, split):
    gen = torch.Generator().manual_seed(hash((fmt, str(dtype), split)) % 2**31)
    # 37 blocks: lanes get 2 or 3 blocks at split 1, slices end unevenly at 2 and 4.
    n, nb, m = 5, 37, 3
    q = random_blocks(n, nb, fmt, gen) if split != 2 else \
        (ik.quantize_q4_k if fmt == "Q4_K" else ik.quantize_q6_k)(torch.randn(n, nb * 256, generator=gen))
    x = torch.randn(m, nb * 256, generator=gen).to(dtype)
    w = (ik.dequantize_q4_k if fmt == "Q4_K" else ik.dequantize_q6_k)(q).double()
    ref = x.double() @ w.T
    out = torch.from_numpy(emulate(q.numpy(), x.float().numpy(), fmt, split)).to(dtype)
    # The kernel rounds its fp32 sums once to x's dtype: the dtype's budget of fp64.
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < TOL[dtype], f"relative error {err:.3g}"
    if dtype == torch.float32:  # and the order costs nothing measurable in fp32
        assert err < 1e-6, f"fp32 relative error {err:.3g}"
