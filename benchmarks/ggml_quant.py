"""ggml's own k-quant quantiser (ggml_quantize_chunk, through ggml-python, which builds ggml
from source): the tests' independent reference for the quantiser's quality
(tests/test_q4k.py) and the benchmarks' anchor for its speed (bench_q4k_cpu.py)."""

from __future__ import annotations

import ctypes

import torch

BLOCK_BYTES = {"Q4_K": 144, "Q6_K": 210}


def quantize(w: torch.Tensor, fmt: str, imatrix: torch.Tensor | None = None) -> torch.Tensor:
    """w [N, K] (CPU, read as float32) -> ggml's bytes, uint8 [N, K / 256 * block bytes], on
    the calling thread. ImportError without ggml-python."""
    import ggml
    import numpy as np

    gtype = {"Q4_K": ggml.GGML_TYPE_Q4_K, "Q6_K": ggml.GGML_TYPE_Q6_K}[fmt]
    n, k = w.shape
    src = np.ascontiguousarray(w.float().numpy(), dtype=np.float32)
    dst = np.zeros((n, k // 256 * BLOCK_BYTES[fmt]), dtype=np.uint8)
    fptr = ctypes.POINTER(ctypes.c_float)
    im = None if imatrix is None else np.ascontiguousarray(imatrix.float().numpy(), dtype=np.float32)
    ggml.ggml_quantize_chunk(gtype, src.ctypes.data_as(fptr), dst.ctypes.data_as(ctypes.c_void_p),
                             0, n, k, None if im is None else im.ctypes.data_as(fptr))
    return torch.from_numpy(dst)
