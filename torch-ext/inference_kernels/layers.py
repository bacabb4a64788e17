"""Layers for `kernels.kernelize`: each replaces the forward of the layer it is named
after (transformers' RMSNorm, SiLU and LlamaMLP, torch's nn.LayerNorm, vLLM's SiluAndMul)
and reads that layer's own attributes (they have no __init__)."""

import torch

from ._ops import ops


class RMSNorm(torch.nn.Module):
    """Replaces transformers' `RMSNorm` (e.g. `LlamaRMSNorm`: `weight`, `variance_epsilon`)."""

    can_torch_compile: bool = True
    has_backward: bool = False

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(hidden_states, memory_format=torch.contiguous_format)
        ops.rms_norm(out, hidden_states, self.weight, self.variance_epsilon)
        return out


class LayerNorm(torch.nn.Module):
    """Replaces `torch.nn.LayerNorm` (`weight`, `bias`, `eps`, `normalized_shape`).

    nn.LayerNorm is not marked for the Hub: mark it (or a subclass) with
    `kernels.replace_kernel_forward_from_hub(nn.LayerNorm, "LayerNorm")`. A
    `normalized_shape` of several dimensions normalises over the last ones flattened
    into one (reshape copies when they are not contiguous), exactly as nn.LayerNorm.
    """

    can_torch_compile: bool = True
    has_backward: bool = False

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        shape = tuple(self.normalized_shape)
        k = len(shape)
        if input.dim() < k or tuple(input.shape[input.dim() - k:]) != shape:
            raise ValueError(f"LayerNorm: input of shape {tuple(input.shape)} does not end in "
                             f"normalized_shape {shape}")
        x = input if k == 1 else input.reshape(*input.shape[:input.dim() - k], -1)
        weight = None if self.weight is None else self.weight.reshape(-1)
        bias = None if self.bias is None else self.bias.reshape(-1)
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        ops.layer_norm(out, x, weight, bias, self.eps)
        return out if k == 1 else out.view(input.shape)


class SiluAndMul(torch.nn.Module):
    """``silu(x[..., :d]) * x[..., d:]`` for ``x`` of shape ``[..., 2d]`` (vLLM's SiluAndMul)."""

    can_torch_compile: bool = True
    has_backward: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=x.dtype, device=x.device)
        ops.silu_and_mul(out, x)
        return out


class Silu(torch.nn.Module):
    """Replaces transformers' `SiLU` (`SiLUActivation`, what `ACT2FN["silu"]` builds)."""

    can_torch_compile: bool = True
    has_backward: bool = False

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(input, memory_format=torch.contiguous_format)
        ops.silu(out, input)
        return out


class LlamaMLP(torch.nn.Module):
    """``down_proj(silu(gate_proj(x)) * up_proj(x))`` with the host module's projections.

    For MLPs whose activation is silu (`hidden_act="silu"`, Llama and most of its
    descendants): the layer does not read `act_fn`. transformers 5.22 does not mark
    `LlamaMLP` for the Hub; decorate the MLP class with
    `kernels.use_kernel_forward_from_hub("LlamaMLP")` to kernelize it.
    """

    can_torch_compile: bool = True
    has_backward: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.gate_proj(x)
        out = torch.empty_like(gate, memory_format=torch.contiguous_format)
        ops.silu_mul(out, gate, self.up_proj(x))
        return self.down_proj(out)
