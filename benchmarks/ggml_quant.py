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


class MulMat:
    """x [M, K] fp32 times W^T on ggml's CPU kernels, llama.cpp's (they quantise x to Q8_K
    first and take integer dot products), for W in ggml's bytes: the benchmarks' anchor for
    the CPU gemv (bench_q4k_cpu.py). `copies` weight tensors, each with its own graph, for
    cold-cache timing; one persistent thread pool of `threads` (ggml's own threads, not
    torch's). ImportError without ggml-python."""

    def __init__(self, q: torch.Tensor, fmt: str, k: int, m: int, copies: int = 1, threads: int = 1):
        import ggml
        import numpy as np

        self.ggml, self.np = ggml, np
        gtype = {"Q4_K": ggml.GGML_TYPE_Q4_K, "Q6_K": ggml.GGML_TYPE_Q6_K}[fmt]
        n, wbytes = q.shape[0], q.numel()
        per = wbytes + 4 * n * m + 2 * ggml.ggml_tensor_overhead() + ggml.ggml_graph_overhead_custom(4, False)
        mem = copies * (per + 256) + 4 * m * k + (1 << 20)
        self.ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=mem, mem_buffer=None, no_alloc=False))
        self.x = ggml.ggml_new_tensor_2d(self.ctx, ggml.GGML_TYPE_F32, k, m)
        src = np.ascontiguousarray(q.numpy())
        self.graphs, self.outs, self.plans, self.work = [], [], [], []
        tp = ggml.ggml_threadpool_params_default(threads)
        self.pool = ggml.ggml_threadpool_new(ctypes.byref(tp))
        for _ in range(copies):
            w = ggml.ggml_new_tensor_2d(self.ctx, gtype, k, n)
            ctypes.memmove(ggml.ggml_get_data(w), src.ctypes.data, wbytes)
            y = ggml.ggml_mul_mat(self.ctx, w, self.x)
            gf = ggml.ggml_new_graph_custom(self.ctx, 4, False)
            ggml.ggml_build_forward_expand(gf, y)
            plan = ggml.ggml_graph_plan(gf, threads, self.pool)
            buf = np.zeros(max(1, plan.work_size), dtype=np.uint8)  # kept alive with the plan
            plan.work_data = buf.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte))
            self.graphs.append(gf), self.outs.append(y), self.plans.append(plan), self.work.append(buf)
        self.n, self.m = n, m

    def set_x(self, x: torch.Tensor) -> None:
        xs = self.np.ascontiguousarray(x.float().numpy())
        ctypes.memmove(self.ggml.ggml_get_data(self.x), xs.ctypes.data, xs.nbytes)

    def run(self, i: int = 0) -> None:
        if self.ggml.ggml_graph_compute(self.graphs[i], ctypes.byref(self.plans[i])) != 0:
            raise RuntimeError("ggml_graph_compute failed")

    def out(self, i: int = 0) -> torch.Tensor:
        p = ctypes.cast(self.ggml.ggml_get_data(self.outs[i]), ctypes.POINTER(ctypes.c_float))
        return torch.from_numpy(self.np.ctypeslib.as_array(p, shape=(self.m, self.n)).copy())

    def close(self) -> None:
        self.ggml.ggml_threadpool_free(self.pool)
        self.ggml.ggml_free(self.ctx)
