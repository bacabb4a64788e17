"""Liger's Triton RMSNorm forward kernels compiled for sm_90 without a GPU, for a SASS
comparison with ours (BENCHMARKS.md, "Offline SASS comparison"). Not part of the package.

Needs triton and liger-kernel importable, e.g. installed apart from the project's venv:
    pip install --target /tmp/tri triton liger-kernel==0.8.5 --no-deps   (triton with its deps)
    PYTHONPATH=/tmp/tri python benchmarks/liger_sass.py /tmp/liger_sass
    cuobjdump -sass /tmp/liger_sass/rms_norm.cubin; cuobjdump -res-usage ...
Writes rms_norm.{cubin,ptx} and fused_add_rms_norm.{cubin,ptx}: bf16, hidden 4096,
8 warps (Liger's calculate_settings for 4096), pointers and strides marked 16-divisible as
the Triton runtime specialises them.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, without its warning

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402


def build(fn, args, constexprs, aligned, out: Path, name: str):
    sig = dict(args)
    sig.update({k: "constexpr" for k in constexprs})
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
    (out / f"{name}.cubin").write_bytes(k.asm["cubin"])
    (out / f"{name}.ptx").write_text(k.asm["ptx"])
    print(f"{name}: {out / name}.cubin")


def main() -> int:
    from liger_kernel.ops.fused_add_rms_norm import _fused_add_rms_norm_forward_kernel
    from liger_kernel.ops.rms_norm import _rms_norm_forward_kernel

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/liger_sass")
    out.mkdir(parents=True, exist_ok=True)
    rows = [("Y_ptr", "*bf16"), ("Y_row_stride", "i32"), ("X_ptr", "*bf16"), ("X_row_stride", "i32"),
            ("W_ptr", "*bf16"), ("W_row_stride", "i32"), ("RSTD_ptr", "*fp32"), ("RSTD_row_stride", "i32"),
            ("n_cols", "i32"), ("eps", "fp32"), ("offset", "fp32")]
    build(_rms_norm_forward_kernel, rows,
          {"casting_mode": 0, "elementwise_affine": True, "BLOCK_SIZE": 4096}, (0, 1, 2, 3, 4, 6, 8), out, "rms_norm")
    fused = [("Y_ptr", "*bf16"), ("Y_row_stride", "i32"), ("S_ptr", "*bf16"), ("S_row_stride", "i32"),
             ("X_ptr", "*bf16"), ("X_row_stride", "i32"), ("R_ptr", "*bf16"), ("R_row_stride", "i32"),
             ("W_ptr", "*bf16"), ("W_row_stride", "i32"), ("RSTD_ptr", "*fp32"), ("RSTD_row_stride", "i32"),
             ("n_cols", "i32"), ("eps", "fp32"), ("offset", "fp32")]
    build(_fused_add_rms_norm_forward_kernel, fused, {"casting_mode": 0, "BLOCK_SIZE": 4096},
          (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12), out, "fused_add_rms_norm")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
