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
