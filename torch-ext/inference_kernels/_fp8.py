"""The FP8 format the *_fp8 ops write, by backend: float8_e4m3fn (max 448) on the CPU and
CUDA; float8_e4m3fnuz (max 240, NaN 0x80, no -0) on ROCm, what torch uses for gfx942 and
gfx90a. The kernels' encoders are in common/fp8.h."""

import torch

FP8_DTYPE = torch.float8_e4m3fnuz if torch.version.hip else torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8_DTYPE).max
