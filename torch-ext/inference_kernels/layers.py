"""Layers for `kernels.kernelize`: each replaces the forward of the transformers layer
of the same name and reads that layer's own attributes (they have no __init__)."""

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
