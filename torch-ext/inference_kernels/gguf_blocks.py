"""GGUF k-quant block sizes and layouts (common/ggml_blocks.h, mirrored), pure torch.

A quantised weight of N rows and K input columns is a uint8 tensor
``[N, K // 256 * block_bytes]``: each row is K/256 blocks back to back, exactly the
bytes a .gguf file stores for that tensor (ggml's ``block_q4_K`` / ``block_q6_K``).

Q4_K (144 bytes): ``half d; half dmin; uint8 scales[12]; uint8 qs[128]``;
weight = d * sc[j] * q - dmin * m[j], 8 sub-blocks of 32, 6-bit sc and m.
Q6_K (210 bytes): ``uint8 ql[128]; uint8 qh[64]; int8 scales[16]; half d``;
weight = d * scales[j] * (q - 32), 16 sub-blocks of 16, q 6-bit.
"""

from typing import Dict, Tuple

import torch

QK_K = 256  # weights per super-block
BLOCK_BYTES: Dict[str, int] = {"Q4_K": 144, "Q6_K": 210}


def quantized_shape(n: int, k: int, fmt: str) -> Tuple[int, int]:
    """Byte shape ``[n, k / 256 * block_bytes]`` of an ``[n, k]`` weight in ``fmt``."""
    if k % QK_K:
        raise ValueError(f"K must be a multiple of {QK_K} for {fmt}, got {k}")
    return n, k // QK_K * BLOCK_BYTES[fmt]


def in_features(q: torch.Tensor, fmt: str) -> int:
    """K of a quantised weight, from its bytes per row."""
    size = BLOCK_BYTES[fmt]
    if q.dtype != torch.uint8:
        raise ValueError(f"a {fmt} weight is uint8 [N, K / 256 * {size}], got dtype {q.dtype}")
    if q.dim() != 2 or q.shape[1] % size:
        raise ValueError(f"a {fmt} weight is uint8 [N, K / 256 * {size}], got shape {tuple(q.shape)}")
    return q.shape[1] // size * QK_K


def unpack_scale_min(scales: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Q4_K's 12 packed bytes ``[..., 12]`` -> 6-bit (scales, mins), each ``[..., 8]``.

    ggml's get_scale_min_k4: bytes 0-3 hold scales 0-3, bytes 4-7 mins 0-3 (low 6
    bits); sub-blocks 4-7 keep their low nibbles in bytes 8-11 and their top 2 bits in
    the top bits of bytes 0-3 (scales) and 4-7 (mins).
    """
    s = scales.to(torch.int32)
    lo_s, lo_m, hi = s[..., 0:4], s[..., 4:8], s[..., 8:12]
    sc = torch.cat([lo_s & 63, (hi & 0x0F) | ((lo_s >> 6) << 4)], dim=-1)
    mn = torch.cat([lo_m & 63, (hi >> 4) | ((lo_m >> 6) << 4)], dim=-1)
    return sc.to(torch.uint8), mn.to(torch.uint8)


def dequantize(q: torch.Tensor, fmt: str) -> torch.Tensor:
    """``fmt`` bytes ``[N, K / 256 * block_bytes]`` -> float32 ``[N, K]`` in plain torch ops,
    on q's device (the GPU path of ``quant.dequantize``; the ops' CPU kernels are faster
    on the CPU). Same arithmetic as gguf-py and the kernels: ``(d * sc) * q - dmin * m``
    (Q4_K) and ``(d * scale) * (q - 32)`` (Q6_K) in float32, each product rounded.
    """
    n, k = q.shape[0], in_features(q, fmt)
    b = q.reshape(n, k // QK_K, BLOCK_BYTES[fmt])
    if fmt == "Q4_K":
        d = b[..., 0:2].contiguous().view(torch.float16).float()       # [n, nb, 1]
        dmin = b[..., 2:4].contiguous().view(torch.float16).float()
        sc, mn = unpack_scale_min(b[..., 4:16])                        # [n, nb, 8]
        qs = b[..., 16:].reshape(n, -1, 4, 1, 32)                      # chunk c: bytes 32c..32c+31
        levels = torch.cat([qs & 0x0F, qs >> 4], dim=3).reshape(n, -1, 8, 32).float()
        ds = (d * sc.float()).unsqueeze(-1)
        dm = (dmin * mn.float()).unsqueeze(-1)
        return (ds * levels - dm).reshape(n, k)
    ql, qh = b[..., 0:128].to(torch.int32), b[..., 128:192].to(torch.int32)
    scales = b[..., 192:208].contiguous().view(torch.int8).float()     # [n, nb, 16]
    d = b[..., 208:210].contiguous().view(torch.float16).float()       # [n, nb, 1]
    parts = []
    for h in range(2):  # weights 128h + 32s + l: ql[64h + 32(s % 2) + l] nibble s // 2, qh bits 2s
        for s in range(4):
            lo = (ql[..., 64 * h + 32 * (s % 2):64 * h + 32 * (s % 2) + 32] >> (4 * (s // 2))) & 0x0F
            hi = (qh[..., 32 * h:32 * h + 32] >> (2 * s)) & 3
            parts.append(lo | (hi << 4))
    levels = (torch.stack(parts, dim=2) - 32).float().reshape(n, -1, 16, 16)
    ds = (d * scales).unsqueeze(-1)
    return (ds * levels).reshape(n, k)


# The tiled layouts (common/ggml_blocks.h has the byte maps and why): the same blocks, a
# tile of 16 rows' blocks of one super-block together (2304 bytes for Q4_K, 3360 for
# Q6_K), in the order the CUDA mat-vec's lanes read them. Ours, not ggml's: .gguf files
# hold the rows. Each is a permutation of the tile's 16 blocks' bytes.
TILE_ROWS = 16
# Q4_K's qs words in the tiled layout hold their bytes in this order: the kernel reads
# the nibbles of bytes 0 and 1 from bits 0 and 16 of a word with one mask.
_Q4K_WORD_ORDER = (0, 2, 1, 3)
TILE_BYTES: Dict[str, int] = {fmt: TILE_ROWS * size for fmt, size in BLOCK_BYTES.items()}
_TILE_ORDER: Dict[str, torch.Tensor] = {}


def _tile_order(fmt: str) -> torch.Tensor:
    """order[j] = which byte of a tile's 16 blocks (row r's byte e at r * block + e) goes
    to byte j of the tiled block."""
    if fmt not in _TILE_ORDER:
        size, order = BLOCK_BYTES[fmt], [0] * TILE_BYTES[fmt]
        for r in range(TILE_ROWS):
            big, g = divmod(r, 8)
            for t in range(4):
                i = 4 * g + t  # the lane that reads rows g and g + 8
                if fmt == "Q4_K":
                    for c in range(4):  # qs[32c + 8t ..] at 512c + 16i + 8 * big, each word's bytes 0, 2, 1, 3
                        for e in range(8):
                            src = (e & 4) | _Q4K_WORD_ORDER[e & 3]
                            order[512 * c + 16 * i + 8 * big + e] = r * size + 16 + 32 * c + 8 * t + src
                else:
                    for n in range(2):
                        for h in range(2):
                            offsets = (64 * n + 16 * h, 64 * n + 32 + 16 * h, 128 + 32 * n + 16 * h)
                            for kind, off in enumerate(offsets):
                                w = 12 * big + 6 * n + 3 * h + kind
                                for e in range(4):
                                    order[512 * (w // 4) + 16 * i + 4 * (w % 4) + e] = r * size + off + 4 * t + e
            if fmt == "Q4_K":  # d, dmin, scales
                for e in range(16):
                    order[2048 + 16 * r + e] = r * size + e
            else:  # scales, then d
                for e in range(16):
                    order[3072 + 16 * r + e] = r * size + 192 + e
                for e in range(2):
                    order[3328 + 2 * r + e] = r * size + 208 + e
        assert sorted(order) == list(range(TILE_BYTES[fmt]))
        _TILE_ORDER[fmt] = torch.tensor(order)
    return _TILE_ORDER[fmt]


def tile(q: torch.Tensor, fmt: str) -> torch.Tensor:
    """``fmt`` rows ``[N, K / 256 * block]`` -> the tiled layout ``[ceil(N / 16), K / 256,
    16 * block]`` (rows past N zero). Pure torch, on q's device."""
    k = in_features(q, fmt)
    n, nb, size = q.shape[0], k // QK_K, BLOCK_BYTES[fmt]
    tiles = -(-n // TILE_ROWS)
    if tiles * TILE_ROWS != n:
        q = torch.cat([q, q.new_zeros(tiles * TILE_ROWS - n, q.shape[1])])
    b = q.reshape(tiles, TILE_ROWS, nb, size).transpose(1, 2).reshape(tiles, nb, TILE_BYTES[fmt])
    return b[..., _tile_order(fmt).to(q.device)].contiguous()


def untile(qt: torch.Tensor, n: int, fmt: str) -> torch.Tensor:
    """The tiled layout back to ``fmt`` rows ``[n, K / 256 * block]`` (:func:`tile`'s inverse)."""
    check_tiled(qt, n, fmt)
    tiles, nb, size = qt.shape[0], qt.shape[1], BLOCK_BYTES[fmt]
    b = torch.empty_like(qt)
    b[..., _tile_order(fmt).to(qt.device)] = qt
    return b.reshape(tiles, nb, TILE_ROWS, size).transpose(1, 2).reshape(tiles * TILE_ROWS, nb * size)[:n].contiguous()


def check_tiled(qt: torch.Tensor, n: int, fmt: str) -> None:
    """Raises ValueError unless ``qt`` is tiled ``fmt`` bytes for ``n`` rows."""
    tiles, size = -(-n // TILE_ROWS), TILE_BYTES[fmt]
    if qt.dtype != torch.uint8 or qt.dim() != 3 or qt.shape[2] != size or qt.shape[0] != tiles:
        raise ValueError(f"tiled {fmt} bytes for N = {n} are uint8 [{tiles}, K / 256, {size}], "
                         f"got {qt.dtype} {tuple(qt.shape)}")

