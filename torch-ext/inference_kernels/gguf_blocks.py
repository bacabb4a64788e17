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


# Q4_K's tiled layout (common/ggml_blocks.h has the byte map and why): the same blocks,
# a tile of 16 rows' blocks of one super-block in 2304 contiguous bytes, in the order
# the CUDA mat-vec's lanes read them. Ours, not ggml's: .gguf files hold the rows.
Q4K_TILE_ROWS = 16
Q4K_TILE_BYTES = Q4K_TILE_ROWS * BLOCK_BYTES["Q4_K"]
Q4K_TILE_HEADS = 2048  # offset of the 16 rows' d, dmin and scales in a tile's block


def tile_q4k(q: torch.Tensor) -> torch.Tensor:
    """Q4_K rows ``[N, K / 256 * 144]`` -> the tiled layout ``[ceil(N / 16), K / 256, 2304]``
    (rows past N zero). Pure torch, on q's device."""
    k = in_features(q, "Q4_K")
    n, nb = q.shape[0], k // QK_K
    tiles = -(-n // Q4K_TILE_ROWS)
    if tiles * Q4K_TILE_ROWS != n:
        q = torch.cat([q, q.new_zeros(tiles * Q4K_TILE_ROWS - n, q.shape[1])])
    b = q.reshape(tiles, Q4K_TILE_ROWS, nb, 144).transpose(1, 2)  # [tile, block, row, byte]
    heads = b[..., :16].reshape(tiles, nb, 256)
    # qs of row 8h + g, byte 32c + 8t + e -> byte 512c + 16(4g + t) + 8h + e
    qs = b[..., 16:].reshape(tiles, nb, 2, 8, 4, 4, 8).permute(0, 1, 4, 3, 5, 2, 6)
    return torch.cat([qs.reshape(tiles, nb, Q4K_TILE_HEADS), heads], dim=2).contiguous()


def untile_q4k(qt: torch.Tensor, n: int) -> torch.Tensor:
    """The tiled layout back to Q4_K rows ``[n, K / 256 * 144]`` (:func:`tile_q4k`'s inverse)."""
    check_tiled_q4k(qt, n)
    tiles, nb = qt.shape[0], qt.shape[1]
    qs = qt[..., :Q4K_TILE_HEADS].reshape(tiles, nb, 4, 8, 4, 2, 8).permute(0, 1, 5, 3, 2, 4, 6)
    heads = qt[..., Q4K_TILE_HEADS:].reshape(tiles, nb, Q4K_TILE_ROWS, 16)
    b = torch.cat([heads, qs.reshape(tiles, nb, Q4K_TILE_ROWS, 128)], dim=3)
    return b.transpose(1, 2).reshape(tiles * Q4K_TILE_ROWS, nb * 144)[:n].contiguous()


def check_tiled_q4k(qt: torch.Tensor, n: int) -> None:
    """Raises ValueError unless ``qt`` is tiled Q4_K bytes for ``n`` rows."""
    tiles = -(-n // Q4K_TILE_ROWS)
    if qt.dtype != torch.uint8 or qt.dim() != 3 or qt.shape[2] != Q4K_TILE_BYTES or qt.shape[0] != tiles:
        raise ValueError(f"tiled Q4_K bytes for N = {n} are uint8 [{tiles}, K / 256, {Q4K_TILE_BYTES}], "
                         f"got {qt.dtype} {tuple(qt.shape)}")
