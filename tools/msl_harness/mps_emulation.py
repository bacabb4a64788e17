"""Builds the Metal host wrappers as a CPU torch extension whose dispatches the MSL
harness runs (mps_emulation.cpp), and loads it: the ops of torch-ext/torch_binding.cpp's
METAL_KERNEL block, registered for CPU tensors under torch.ops.<NAME>.

    ops = mps_emulation.load(shader_libraries)   # msl.build(...) paths
    ops.rms_norm(out, x, weight, 1e-6)
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msl

NAME = "ik_mps_emulated"
SHIM = msl.HERE / "mps_emulation.cpp"
ROOT = msl.ROOT
SOURCES = [ROOT / "torch-ext" / "torch_binding.cpp", *sorted((ROOT / "metal_kernels").glob("*_torch.cpp")),
           SHIM]
# torch_binding.cpp includes "registration.h" after <torch/library.h>: this one makes its
# TORCH_LIBRARY plain and sends the kMPS registrations to the CPU key (c10's own kMPS
# is declared by then, so only torch_binding.cpp's uses are renamed).
REGISTRATION_H = """#pragma once
#define TORCH_LIBRARY_EXPAND(NAME, MODULE) TORCH_LIBRARY(NAME, MODULE)
#define REGISTER_EXTENSION(NAME)
#define kMPS kCPU
"""


def _flags(torch) -> list[str]:
    from torch.utils import cpp_extension
    incs = [f"-isystem{p}" for p in cpp_extension.include_paths("cpu")]
    return ["-std=c++20", "-O1", "-fPIC", "-Wall", "-DMETAL_KERNEL",
            "-DIK_METAL_DEVICE=c10::DeviceType::CPU", f"-DTORCH_EXTENSION_NAME={NAME}",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            *incs, f"-isystem{sysconfig.get_paths()['include']}"]


def build(cxx: str = "g++") -> Path:
    """The extension, cached by content under build/_work/msl/mps_emulation/."""
    import torch
    headers = sorted([*(ROOT / "common").glob("*.h"), *(ROOT / "metal_kernels").glob("*.h"),
                      ROOT / "torch-ext" / "torch_binding.h"])
    h = hashlib.sha256()
    for p in [*SOURCES, *headers]:
        h.update(p.read_bytes())
    flags = _flags(torch)
    h.update(" ".join([cxx, *flags, torch.__version__, REGISTRATION_H]).encode())
    work = msl.CACHE / "mps_emulation"
    so = work / f"{NAME}-{h.hexdigest()[:16]}.so"
    if so.exists():
        return so
    gen = work / "gen"
    gen.mkdir(parents=True, exist_ok=True)
    (gen / "registration.h").write_text(REGISTRATION_H)
    incs = [f"-I{gen}", f"-I{ROOT / 'torch-ext'}", f"-I{ROOT / 'common'}", f"-I{ROOT / 'metal_kernels'}"]

    def compile_one(src: Path) -> Path:
        obj = work / f"{src.stem}-{h.hexdigest()[:16]}.o"
        r = subprocess.run([cxx, *flags, *incs, "-c", str(src), "-o", str(obj)],
                           capture_output=True, text=True)
        if r.returncode:
            raise msl.CompileError(f"{src}:\n{r.stderr}")
        return obj

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        objs = list(pool.map(compile_one, SOURCES))
    lib = Path(torch.__file__).parent / "lib"
    tmp = so.with_suffix(f".{os.getpid()}.tmp")
    r = subprocess.run([cxx, "-shared", "-o", str(tmp), *map(str, objs), f"-L{lib}", "-lc10",
                        "-ltorch", "-ltorch_cpu", "-ldl"], capture_output=True, text=True)
    if r.returncode:
        raise msl.CompileError(r.stderr)
    os.replace(tmp, so)
    for old in [*objs, *work.glob(f"{NAME}-*.so")]:
        if old != so:
            old.unlink(missing_ok=True)
    return so


def load(shader_libraries, cxx: str = "g++"):
    """torch.ops.<NAME>, with the harness running `shader_libraries` (msl.build paths)."""
    import torch
    so = build(cxx)
    torch.ops.load_library(str(so))
    rc = ctypes.CDLL(str(so)).ik_emulation_load("\n".join(map(str, shader_libraries)).encode())
    if rc:
        raise RuntimeError(f"cannot load the shader libraries {shader_libraries}")
    return getattr(torch.ops, NAME)
