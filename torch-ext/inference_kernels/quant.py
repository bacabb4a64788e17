"""Quantising a model's linear layers to GGUF k-quants, llama.cpp's Q4_K_M recipe.

    imatrix = collect_imatrix(model, batches)           # optional, improves Q4_K
    report = quantize_model_q4_k_m(model, imatrix)      # nn.Linear -> Q4KLinear, in place
"""

import itertools
import re
import warnings
from typing import Dict, Iterable, List, Optional, Sequence

import torch

from . import gguf_blocks
from ._ops import ops

# Per format: (quantise op, dequantise op, gemv op).
_OPS = {
    "Q4_K": ("quantize_q4_k", "dequantize_q4_k", "q4k_gemv"),
    "Q6_K": ("quantize_q6_k", "dequantize_q6_k", "q6k_gemv"),
}
# Rows of x up to which the block-by-block gemv is used; more rows amortise one
# dequantisation over a matmul (prefill).
GEMV_MAX_ROWS = 8


def quantize(weight: torch.Tensor, fmt: str, imatrix: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``weight`` [N, K] (read as float32) -> ``fmt`` bytes, uint8 [N, K / 256 * block bytes].

    The quantiser runs on the CPU (every build carries it); the bytes go back to the
    weight's device.
    """
    device = weight.device
    weight = weight.detach().to("cpu", torch.float32).contiguous()
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D [N, K], got shape {tuple(weight.shape)}")
    out = torch.empty(gguf_blocks.quantized_shape(*weight.shape, fmt), dtype=torch.uint8,
                      device=weight.device)
    if imatrix is not None:
        imatrix = imatrix.detach().to(device=weight.device, dtype=torch.float32).contiguous()
    getattr(ops, _OPS[fmt][0])(out, weight, imatrix)
    return out.to(device)


def dequantize(q: torch.Tensor, fmt: str, k: Optional[int] = None) -> torch.Tensor:
    """``fmt`` bytes [N, K / 256 * block bytes] -> float32 [N, K]; ``k``, if given, is checked."""
    kq = gguf_blocks.in_features(q, fmt)
    if k is not None and k != kq:
        raise ValueError(f"k={k} does not match the {kq} columns the {fmt} bytes hold")
    if q.device.type != "cpu":  # no GPU dequantisation kernel: plain torch, on the device
        return gguf_blocks.dequantize(q, fmt)
    out = torch.empty((q.shape[0], kq), dtype=torch.float32, device=q.device)
    getattr(ops, _OPS[fmt][1])(out, q)
    return out


def gemv(x: torch.Tensor, q: torch.Tensor, fmt: str, n: Optional[int] = None) -> torch.Tensor:
    """``x @ dequantize(q, fmt).T`` for ``x`` [M <= 8, K], in x's dtype.

    ``q``: ``fmt`` rows [N, K / 256 * block bytes], or the tiled layout
    (:func:`gguf_blocks.tile`) with ``n`` its rows (default: every row of its tiles).
    The CUDA kernel reads tiled bytes as they are; other backends untile them first (a
    copy of the weight per call, with a warning: tile weights for CUDA only).
    """
    if q.dim() == 3:
        n = q.shape[0] * gguf_blocks.TILE_ROWS if n is None else n
        gguf_blocks.check_tiled(q, n, fmt)
        if not (q.device.type == "cuda" and torch.version.hip is None):
            warnings.warn(f"tiled {fmt} weights are untiled on every call on {q.device.type}"
                          f"{' (ROCm)' if torch.version.hip else ''}: only the CUDA kernel reads "
                          "them as they are; keep ggml's rows here", stacklevel=2)
            q = gguf_blocks.untile(q, n, fmt)
    elif n is not None and n != q.shape[0]:
        raise ValueError(f"n={n} does not match the {q.shape[0]} rows of the {fmt} bytes")
    out = torch.empty((x.shape[0], q.shape[0] if q.dim() == 2 else n), dtype=x.dtype, device=x.device)
    getattr(ops, _OPS[fmt][2])(out, x, q)
    return out


class Q4KLinear(torch.nn.Module):
    """A linear layer whose weight is held as GGUF Q4_K or Q6_K bytes (``fmt``).

    ``qweight``: uint8 bytes of ``fmt`` for an ``[out_features, in_features]`` weight, ggml's
    rows (``gguf_blocks.quantized_shape``) or, with ``tiled=True``, the tiled layout
    (``gguf_blocks.tile``); a shape that does not match raises ValueError. ``bias``:
    ``[out_features]`` or None (copied).

    forward: for inputs of at most 8 rows (tokens), the backend's gemv dequantises
    the weight block by block as it multiplies; for more rows the weight is dequantised
    to fp32 once per call, cast to x's dtype and used in a matmul. The bias, if any,
    is added in x's dtype. ``tile_()`` keeps the weight in the tiled layout that the CUDA
    gemv reads faster, with the same results (``qweight`` then holds tiled bytes; other
    devices untile it on every call, with a warning: tile only on CUDA). The
    tiled layout is not a file format and may change between versions of the package
    (Q4_K's word order did): save ``rows_qweight()``, and tile after loading.
    """

    def __init__(self, qweight: torch.Tensor, fmt: str, in_features: int, out_features: int,
                 bias: Optional[torch.Tensor] = None, tiled: bool = False):
        super().__init__()
        if fmt not in _OPS:
            raise ValueError(f"fmt must be one of {sorted(_OPS)}, got {fmt!r}")
        if tiled:
            gguf_blocks.check_tiled(qweight, out_features, fmt)
            if qweight.shape[1] * gguf_blocks.QK_K != in_features:
                raise ValueError(f"tiled qweight of shape {tuple(qweight.shape)} holds "
                                 f"{qweight.shape[1] * gguf_blocks.QK_K} columns, not {in_features}")
        elif tuple(qweight.shape) != gguf_blocks.quantized_shape(out_features, in_features, fmt):
            raise ValueError(f"qweight has shape {tuple(qweight.shape)}, expected "
                             f"{gguf_blocks.quantized_shape(out_features, in_features, fmt)} for {fmt}")
        self.fmt = fmt
        self.tiled = tiled
        self.in_features = in_features
        self.out_features = out_features
        self.register_buffer("qweight", qweight)
        self.register_buffer("bias", None if bias is None else bias.detach().clone())

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, fmt: str = "Q4_K",
                    imatrix: Optional[torch.Tensor] = None) -> "Q4KLinear":
        """``linear``'s weight quantised to ``fmt`` (:func:`quantize`, with ``imatrix``), its
        bias kept; the bytes on the weight's device."""
        return cls(quantize(linear.weight, fmt, imatrix), fmt, linear.in_features,
                   linear.out_features, linear.bias)

    def tile_(self) -> "Q4KLinear":
        """Hold ``qweight`` in the tiled layout (:func:`gguf_blocks.tile`), once, after the
        module is on its device. Returns the module."""
        if not self.tiled:
            self.qweight = gguf_blocks.tile(self.qweight, self.fmt)
            self.tiled = True
        return self

    def rows_qweight(self) -> torch.Tensor:
        """``qweight`` as ggml's rows (what a .gguf file holds), tiled or not."""
        return gguf_blocks.untile(self.qweight, self.out_features, self.fmt) if self.tiled else self.qweight

    def dequantized_weight(self) -> torch.Tensor:
        """The weight as float32 ``[out_features, in_features]``, dequantised."""
        return dequantize(self.rows_qweight(), self.fmt, self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_rows(x, 0, self.out_features)

    def forward_rows(self, x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """The outputs ``start:stop`` alone, from those rows of the weight (a view; tiled,
        both on tile boundaries)."""
        q = self.qweight
        if (start, stop) != (0, self.out_features):
            tr = gguf_blocks.TILE_ROWS
            if self.tiled and (start % tr or (stop % tr and stop != self.out_features)):
                raise ValueError(f"rows {start}:{stop} of a tiled weight must start and end on "
                                 f"its {tr}-row tiles")
            q = q[start // tr:(stop + tr - 1) // tr] if self.tiled else q[start:stop]
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).contiguous()
        if 1 <= x2.shape[0] <= GEMV_MAX_ROWS:
            y = gemv(x2, q, self.fmt, stop - start)
        else:
            w = gguf_blocks.untile(q, stop - start, self.fmt) if self.tiled else q
            y = x2 @ dequantize(w, self.fmt, self.in_features).to(x.dtype).T
        if self.bias is not None:
            y = y + self.bias[start:stop].to(x.dtype)
        return y.reshape(*lead, stop - start)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"fmt={self.fmt}, tiled={self.tiled}, bias={self.bias is not None}")


class Q4KGroup:
    """Linear layers that a model calls one after another on the same input, run as one
    gemv over their stacked weights (``fused``, a Q4KLinear): transformers' attention
    calls ``q_proj``, ``k_proj`` and ``v_proj`` on one hidden state, its MLP ``gate_proj``
    and ``up_proj``. At decode sizes one launch over the stacked weight is much faster
    than one each: q, k and v of Llama-3-8B take 7.3 us fused against 13.6 us apart
    (H200, BENCHMARKS.md, twenty-first session). Each member (Q4KPart) asks for its
    outputs; the first ask for an input runs ``fused`` for all members, and the others
    take their columns of that output, each once, while the input is the same tensor at
    the same version (an in-place write, a new tensor or a second ask runs it again).
    Inference tensors keep no version, so under ``torch.inference_mode`` each member
    runs its own rows of the weight instead (the same sums as the unfused layers). Under
    ``torch.compile`` the same tensor is enough (Dynamo cannot read the version). The
    input is held until every member has taken its columns."""

    def __init__(self, fused: "Q4KLinear", sizes: Sequence[int]):
        if sum(sizes) != fused.out_features:
            raise ValueError(f"the members' sizes {list(sizes)} do not add up to the "
                             f"{fused.out_features} outputs of the fused layer")
        self.fused = fused
        self.bounds: List[int] = list(itertools.accumulate(sizes, initial=0))
        self._clear()

    def _clear(self) -> None:
        self._x: Optional[torch.Tensor] = None  # the input of the output held
        self._version = -1
        self._y: Optional[torch.Tensor] = None
        self._waiting: set = set()  # members that have not taken their columns yet

    def output(self, x: torch.Tensor, i: int) -> torch.Tensor:
        """Member ``i``'s columns of the fused layer's output for ``x``: the fused gemv runs
        once per input, and each member takes its slice."""
        start, stop = self.bounds[i], self.bounds[i + 1]
        # Dynamo reads neither is_inference() nor the version counter: inside a compiled
        # forward, the same tensor is enough (transformers' blocks do not write their
        # hidden state between the projections).
        compiling = torch.compiler.is_compiling()
        if not compiling and x.is_inference():
            return self.fused.forward_rows(x, start, stop)
        held = self._x is x and i in self._waiting and (compiling or self._version == x._version)
        if not held:
            self._y = self.fused(x)
            self._x, self._version = x, (-1 if compiling else x._version)
            self._waiting = set(range(len(self.bounds) - 1))
        y = self._y[..., start:stop]
        self._waiting.discard(i)
        if not self._waiting:
            self._clear()
        return y


class Q4KPart(torch.nn.Module):
    """Member ``index`` of a Q4KGroup, in the place of the linear layer it was: its
    ``forward`` returns that layer's outputs. The weight lives in the group's fused
    layer, registered beside it (``quantize_model_q4_k_m(..., fuse=True)``)."""

    def __init__(self, group: Q4KGroup, index: int):
        super().__init__()
        self.group = group  # a plain object: the fused layer is registered once, by the parent
        self.index = index
        self.in_features = group.fused.in_features
        self.out_features = group.bounds[index + 1] - group.bounds[index]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.group.output(x, self.index)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"outputs {self.group.bounds[self.index]}:{self.group.bounds[self.index + 1]} "
                "of the fused layer")


# The layers transformers' Llama-style blocks call one after another on one input.
FUSE_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def fuse_q4k(parent: torch.nn.Module, names: Sequence[str]) -> Optional[str]:
    """Stack ``parent``'s Q4KLinear layers ``names`` into one (registered on ``parent`` as
    their names joined, e.g. ``q_k_v_proj``) and put a Q4KPart in each one's place. Only
    layers of one format, one input size, one layout, no bias or all, and a multiple of
    16 outputs each are stacked; from ``names``, the longest leading run that qualifies
    (Q4_K_M's Q6_K ``v_proj`` leaves ``q_proj`` and ``k_proj``). Returns the new layer's
    name, or None when fewer than two qualify."""
    layers = []
    for name in names:
        m = getattr(parent, name, None)
        if not (isinstance(m, Q4KLinear) and m.out_features % gguf_blocks.TILE_ROWS == 0):
            break
        if layers and (m.fmt, m.in_features, m.tiled, m.bias is None) != (
                layers[0].fmt, layers[0].in_features, layers[0].tiled, layers[0].bias is None):
            break
        layers.append(m)
    if len(layers) < 2:
        return None
    kept = names[:len(layers)]
    fused_name = "_".join(n[:-len("_proj")] if n.endswith("_proj") else n for n in kept) + "_proj"
    if hasattr(parent, fused_name):
        raise ValueError(f"cannot stack {', '.join(kept)}: the module already has an attribute "
                         f"{fused_name!r}")
    first = layers[0]
    bias = None if first.bias is None else torch.cat([m.bias for m in layers])
    # Tiles of 16-row multiples stack as the rows do (tile_q4k).
    fused = Q4KLinear(torch.cat([m.qweight for m in layers]), first.fmt, first.in_features,
                      sum(m.out_features for m in layers), bias, tiled=first.tiled)
    group = Q4KGroup(fused, [m.out_features for m in layers])
    setattr(parent, fused_name, fused)
    for i, name in enumerate(kept):
        setattr(parent, name, Q4KPart(group, i))
    return fused_name


@torch.no_grad()
def collect_imatrix(model: torch.nn.Module, batches: Iterable) -> Dict[str, torch.Tensor]:
    """llama.cpp's importance matrix: for every nn.Linear (by module name), the mean of
    the squared input activations per input column, over all tokens of all batches.

    ``batches``: tensors (passed as ``model(batch)``) or dicts (``model(**batch)``).
    Returns ``{name: float32 [in_features]}``; layers that saw no input are absent.
    """
    sums: Dict[str, torch.Tensor] = {}
    counts: Dict[str, int] = {}

    def hook(name):
        def fn(module, args):
            x = args[0].detach().reshape(-1, module.in_features).to(torch.float64)
            sums[name] = sums.get(name, 0) + x.pow(2).sum(0)
            counts[name] = counts.get(name, 0) + x.shape[0]
        return fn

    handles = [m.register_forward_pre_hook(hook(name)) for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear)]
    try:
        for batch in batches:
            model(**batch) if isinstance(batch, dict) else model(batch)
    finally:
        for h in handles:
            h.remove()
    return {name: (sums[name] / counts[name]).to(torch.float32) for name in sums if counts[name]}


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama.cpp's choice of the layers that get more bits in its *_M mixes: the first
    and last eighth of the layers, and every third layer in between."""
    return (i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8
            or (i_layer - n_layers // 8) % 3 == 2)


_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def q4_k_m_format(name: str, n_layers: int) -> str:
    """The format Q4_K_M gives the linear layer ``name``: Q6_K for ``lm_head`` and, on the
    layers ``use_more_bits`` picks, for ``v_proj`` and ``down_proj``; Q4_K elsewhere."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "lm_head":
        return "Q6_K"
    match = _LAYER_INDEX.search(name)
    if leaf in ("v_proj", "down_proj") and match and use_more_bits(int(match.group(1)), n_layers):
        return "Q6_K"
    return "Q4_K"


@torch.no_grad()
def quantize_model_q4_k_m(model: torch.nn.Module,
                          imatrix: Optional[Dict[str, torch.Tensor]] = None,
                          tile: bool = False, fuse: bool = False) -> Dict[str, str]:
    """Replace the model's nn.Linear layers by Q4KLinear, in place, with llama.cpp's
    Q4_K_M policy (:func:`q4_k_m_format`). ``imatrix``: from :func:`collect_imatrix`.
    ``tile``: hold the layers' weights in the tiled layout (``Q4KLinear.tile_``), on the
    device the weights are on; the CUDA gemv reads it faster. ``fuse``: stack the layers
    a block calls on one input (:data:`FUSE_GROUPS`: q, k, v; gate, up) into one gemv
    each (:func:`fuse_q4k`); the report then also names each stacked layer, e.g.
    ``"...self_attn.q_k_v_proj": "Q4_K: q_proj, k_proj, v_proj"``, and its members'
    entries keep their formats. It pays in a compiled step (an 8-layer Llama-3-8B-shaped
    model on an H200: 798 to 772 us a token); an eager one measured no faster
    (BENCHMARKS.md, twenty-second session), so it is off by default.

    Layers whose in_features is not a multiple of 256 cannot be k-quantised: they stay
    as they are, with a warning. Returns ``{name: "Q4_K" | "Q6_K" | "kept: <why>"}``.
    """
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    indices = [int(m.group(1)) for name, _ in linears if (m := _LAYER_INDEX.search(name))]
    config = getattr(model, "config", None)
    n_layers = getattr(config, "num_hidden_layers", None) or (max(indices) + 1 if indices else 0)
    report: Dict[str, str] = {}
    for name, linear in linears:
        if linear.in_features % gguf_blocks.QK_K:
            report[name] = f"kept: in_features {linear.in_features} is not a multiple of 256"
            warnings.warn(f"{name} stays unquantised: {report[name][6:]}")
            continue
        fmt = q4_k_m_format(name, n_layers)
        im = imatrix.get(name) if imatrix else None
        parent_name, _, leaf = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        layer = Q4KLinear.from_linear(linear, fmt, im)
        if tile:
            layer.tile_()
        setattr(parent, leaf, layer)
        report[name] = fmt
    if fuse:
        for parent_name, parent in list(model.named_modules()):
            for names in FUSE_GROUPS:
                fused_name = fuse_q4k(parent, names)
                if fused_name:
                    fused = getattr(parent, fused_name)
                    members = [n for n in names if isinstance(getattr(parent, n), Q4KPart)]
                    key = f"{parent_name}.{fused_name}" if parent_name else fused_name
                    report[key] = f"{fused.fmt}: {', '.join(members)}"
    return report
