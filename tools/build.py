#!/usr/bin/env python3
"""Local builder: build.toml -> build/<variant>/, as the `kernels` library loads it.

kernel-builder (Nix) makes the publishable builds; this makes the same layout
for the torch installed here, quickly and incrementally, for development and CI:

    python tools/build.py                 # CUDA if torch has CUDA and nvcc exists, else CPU
    python tools/build.py --backend cpu   # force the CPU variant
    python tools/build.py --backend rocm --compile-only   # HIP -> gfx942/gfx90a assembly
    python tools/build.py --backend cpu --compile-only    # CPU sources -> aarch64 assembly

Steps: validate build.toml with kernel-builder's own parser
(`kernels._rust.Build.open`), generate registration.h and a ninja file under
build/_work/<variant>/ (never in the source tree), run ninja in a subprocess
(it rebuilds only what changed), then lay out build/<variant>/ with the
extension `<id>.abi3.so`, `_ops.py`, the Python package and `metadata.json`
(with a sha256 digest of the files).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Python 3.9 limited API: one binary for every CPython >= 3.9, as the Hub requires.
PY_LIMITED_API = "0x03090000"
BACKENDS = ("cpu", "cuda", "rocm", "metal")


class BuildError(Exception):
    """A one-line, actionable reason the build cannot go on."""


def _require_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        raise BuildError("torch is not installed: run `make build` (it creates .venv) "
                         "or `pip install -r requirements.txt`") from None
    return torch


def _require_kernels_parser():
    try:
        from kernels._rust import Build
    except ImportError:
        raise BuildError("the `kernels` package is not installed: run `make build` "
                         "or `pip install -r requirements.txt`") from None
    return Build


def read_config(root: Path) -> dict:
    Build = _require_kernels_parser()
    try:
        Build.open(str(root))
    except ValueError as e:
        raise BuildError(f"build.toml rejected by kernel-builder's parser: {e}") from None
    with open(root / "build.toml", "rb") as f:
        return tomllib.load(f)


def pick_backend(requested: str | None, torch, compile_only: bool = False) -> str:
    if requested:
        backend = requested
    elif torch.version.hip:
        backend = "rocm"
    elif torch.version.cuda:
        backend = "cuda"
    else:
        backend = "cpu"
    if backend == "cuda":
        if not torch.version.cuda and not compile_only:
            raise BuildError(f"--backend cuda needs a CUDA build of torch, found torch {torch.__version__}")
        if not shutil.which("nvcc"):
            raise BuildError("nvcc not found: install the CUDA toolkit (nvcc on PATH) "
                             "or build the CPU variant with --backend cpu")
    elif backend == "rocm" and compile_only:
        rocm_toolchain()
    elif backend == "cpu" and compile_only:
        aarch64_toolchain()
    elif backend in ("rocm", "metal"):
        raise BuildError(f"the local builder does not build the {backend} backend yet; "
                         "its kernels are checked by `make test` (tests/) and built by kernel-builder")
    return backend


# ROCm compile-only: Debian 12's clang-19 compiles HIP device code for CDNA with the
# AMD device libraries of its rocm-device-libs (ROCm 5.2). hipcc 5.2 is not used: it
# rejects gfx942 and picks NVIDIA whenever nvcc is installed.
ROCM_CLANG = "clang++-19"
ROCM_PACKAGES = "clang-19 lld-19 llvm-19 libamdhip64-dev rocm-device-libs"
ROCM_SYSTEM_DEVICE_LIBS = Path("/usr/lib") / f"{platform.machine()}-linux-gnu" / "amdgcn" / "bitcode"


# CPU compile-only: the CPU sources cross-compiled to aarch64 assembly (kernel-builder also
# builds the CPU backend for aarch64-linux, where only at::vec's portable NEON types run).
AARCH64_CXX = "aarch64-linux-gnu-g++"


def aarch64_toolchain() -> str:
    if not shutil.which(AARCH64_CXX):
        raise BuildError(f"{AARCH64_CXX} is missing: run `make cross-toolchain` "
                         "(apt-get install g++-aarch64-linux-gnu)")
    return AARCH64_CXX


def rocm_toolchain() -> Path:
    """The system device-library directory, once clang-19, llvm-19 and the libs are there."""
    tools = [ROCM_CLANG, "llvm-dis-19", "llvm-as-19"]
    if not all(map(shutil.which, tools)) or not (ROCM_SYSTEM_DEVICE_LIBS / "ocml.bc").exists():
        raise BuildError(f"the ROCm toolchain (clang-19 and the AMD device libraries) is missing: "
                         f"run `make rocm-toolchain` (apt-get install {ROCM_PACKAGES})")
    return ROCM_SYSTEM_DEVICE_LIBS


def rocm_device_libs(work: Path) -> Path:
    """A device-library directory under the build tree: links to the system's bitcode plus
    oclc_isa_version_942.bc, which ROCm 5.2 lacks (it stops at gfx940). It is the gfx940
    file with the ISA version constant 9400 -> 9402; the system is never written."""
    system, libs = rocm_toolchain(), work / "device-libs"
    libs.mkdir(parents=True, exist_ok=True)
    for bc in system.glob("*.bc"):
        if not (libs / bc.name).exists():
            (libs / bc.name).symlink_to(bc)
    derived = libs / "oclc_isa_version_942.bc"
    if not derived.exists():
        ir = subprocess.run(["llvm-dis-19", str(system / "oclc_isa_version_940.bc"), "-o", "-"],
                            check=True, capture_output=True, text=True).stdout
        assert "i32 9400" in ir, "unexpected oclc_isa_version_940.bc"
        subprocess.run(["llvm-as-19", "-o", str(derived)], input=ir.replace("i32 9400", "i32 9402"),
                       check=True, text=True)
    return libs


def rocm_archs(config: dict) -> list[str]:
    archs = set()
    for kernel in config.get("kernel", {}).values():
        if kernel.get("backend") == "rocm":
            archs.update(kernel.get("rocm-archs", []))
    return sorted(archs)


def variant_name(torch, backend: str) -> str:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    abi = "cxx11" if torch.compiled_with_cxx11_abi() else "cxx98"
    if backend == "cuda":
        cu_major, cu_minor = torch.version.cuda.split(".")[:2]
        backend_tag = f"cu{cu_major}{cu_minor}"
    else:
        backend_tag = backend
    return f"torch{major}{minor}-{abi}-{backend_tag}-{platform.machine()}-linux"


def source_hash(root: Path, sources: list[str]) -> tuple[str, bool]:
    """The git tree hash of HEAD (7 hex) and whether the tree is dirty.

    Outside git, a hash of the sources stands in for it.
    """
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                              text=True).stdout.strip()
    try:
        tree = git("rev-parse", "--short=7", "HEAD^{tree}")
        dirty = bool(git("status", "--porcelain"))
        return tree, dirty
    except (subprocess.CalledProcessError, FileNotFoundError):
        h = hashlib.sha1()
        for src in sorted(sources):
            h.update(src.encode())
            h.update((root / src).read_bytes())
        return h.hexdigest()[:7], False


def cuda_home() -> Path:
    """The CUDA toolkit root: $CUDA_HOME, else where nvcc lives, else /usr/local/cuda."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    candidates.append("/usr/local/cuda")
    for c in candidates:
        if c and (Path(c) / "include" / "cuda_runtime.h").exists():
            return Path(c)
    raise BuildError("CUDA headers (cuda_runtime.h) not found: set CUDA_HOME to the CUDA toolkit root")


def has_cuda_headers() -> bool:
    try:
        cuda_home()
        return True
    except BuildError:
        return False


def hip_rules(work: Path, includes: list[Path], macro: str, extra: list[str]) -> list[str]:
    """ninja rule `hip`: device-only clang-19 to assembly for $arch, warnings as errors."""
    incs = " ".join(f"-I{shlex.quote(str(d))}" for d in includes)
    libs = shlex.quote(str(rocm_device_libs(work)))
    return [
        f"hipcxx = {ROCM_CLANG}",
        f"hipflags = -x hip --cuda-device-only -S -O3 -std=c++17 -Wall -Werror -D{macro} "
        f"--rocm-device-lib-path={libs} {incs} {' '.join(extra)}",
        "rule hip",
        "  command = $hipcxx -MD -MF $out.d $hipflags --offload-arch=$arch $in -o $out",
        "  depfile = $out.d",
        "  deps = gcc",
        "  description = HIP $in ($arch)",
    ]


def device_arch(torch) -> str | None:
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}"


def section_archs(kernel: dict, device: str | None) -> list[str]:
    """A CUDA kernel section's capabilities, plus this machine's GPU unless the section
    already builds for it (as such or as its arch-specific variant, e.g. 9.0a)."""
    archs = set(kernel.get("cuda-capabilities", ["9.0"]))
    if device and not {device, device + "a"} & archs:
        archs.add(device)
    return sorted(archs)


def cuda_archs(config: dict, torch) -> list[str]:
    device = device_arch(torch)
    archs = set()
    for kernel in config.get("kernel", {}).values():
        if kernel.get("backend") == "cuda":
            archs.update(section_archs(kernel, device))
    return sorted(archs or {"9.0"})


def gencode(archs: list[str]) -> str:
    return " ".join(f"-gencode=arch=compute_{a.replace('.', '')},code=sm_{a.replace('.', '')}" for a in archs)


REGISTRATION_H = """\
// Generated by tools/build.py; kernel-builder generates the same macros.
#pragma once
#include <Python.h>

#define _CONCAT(A, B) A##B
#define CONCAT(A, B) _CONCAT(A, B)
#define _STRINGIFY(A) #A
#define STRINGIFY(A) _STRINGIFY(A)

#define TORCH_LIBRARY_EXPAND(NAME, MODULE) TORCH_LIBRARY(NAME, MODULE)
#define TORCH_LIBRARY_IMPL_EXPAND(NAME, DEVICE, MODULE) TORCH_LIBRARY_IMPL(NAME, DEVICE, MODULE)

// A module with no methods: importing it runs the static op registrations.
#define REGISTER_EXTENSION(NAME)                                                  \\
  PyMODINIT_FUNC CONCAT(PyInit_, NAME)() {                                        \\
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, STRINGIFY(NAME),   \\
                                        nullptr, 0, nullptr};                     \\
    return PyModule_Create(&module);                                              \\
  }
"""

OPS_PY = """\
# Generated by tools/build.py.
import torch
from . import {id}

ops = torch.ops.{id}


def add_op_namespace_prefix(op_name: str) -> str:
    \"\"\"Prefix op by namespace.\"\"\"
    return f"{id}::{{op_name}}"
"""


def write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def ninja_file(*, root: Path, work: Path, torch, backend: str, ext_id: str, config: dict,
               archs: list[str], compile_only: bool = False) -> str:
    from torch.utils import cpp_extension

    torch_sources = config["torch"]["src"]
    kernel_sources, includes, cxx_extra, cuda_extra, hip_extra = [], [], [], [], []
    # Each .cu builds for its own section's capabilities (kernel-builder's per-kernel
    # build): a section that needs sm_90a features (wgmma) does not drag the others along.
    cu_archs: dict[str, list[str]] = {}
    device = device_arch(torch) if backend == "cuda" else None
    for kernel in config.get("kernel", {}).values():
        if kernel.get("backend") != backend:
            continue
        kernel_sources += kernel["src"]
        if backend == "cuda":
            for src in kernel["src"]:
                if src.endswith(".cu"):
                    cu_archs[src] = section_archs(kernel, device)
        includes += kernel.get("include", [])
        cxx_extra += kernel.get("cxx-flags", [])
        cuda_extra += kernel.get("cuda-flags", [])
        hip_extra += kernel.get("hip-flags", [])

    macro = {"cpu": "CPU_KERNEL", "cuda": "CUDA_KERNEL", "rocm": "ROCM_KERNEL"}[backend]
    # ROCm's host wrappers are the CUDA ones; a CPU torch checks them against its c10/cuda
    # headers when the CUDA headers those include are here (ROCm torch hipifies them).
    host_cuda = backend == "cuda" or (backend == "rocm" and has_cuda_headers())
    if compile_only and host_cuda:
        # A CPU build of torch ships the c10/cuda headers but not this generated one.
        stub = work / "gen" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
        write_if_changed(stub, "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    inc_dirs = [work / "gen", root / "torch-ext", *[root / i for i in dict.fromkeys(includes)],
                *map(Path, cpp_extension.include_paths("cpu")),  # nvcc adds its own
                Path(sysconfig.get_paths()["include"])]
    if host_cuda:
        # The host compiler sees cuda_runtime.h through the c10/cuda headers.
        inc_dirs.append(cuda_home() / "include")
    incs = " ".join(f"-isystem {shlex.quote(str(d))}" if "site-packages" in str(d) or "include/python" in str(d)
                    else f"-I{shlex.quote(str(d))}" for d in inc_dirs)
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    common = (f"-O3 -std=c++20 -DNDEBUG -D{macro} -DPy_LIMITED_API={PY_LIMITED_API} "
              f"-D_GLIBCXX_USE_CXX11_ABI={abi}")
    cxx = os.environ.get("CXX", "c++")
    # CPU compile-only: aarch64 assembly (-S), warnings as errors.
    cross = compile_only and backend == "cpu"
    if cross:
        cxx = aarch64_toolchain()
    if not shutil.which(cxx):
        raise BuildError(f"C++ compiler `{cxx}` not found: install g++ (apt-get install g++) or set CXX")

    lines = [
        "ninja_required_version = 1.3",
        f"cxx = {cxx}",
        f"cxxflags = {common} -fPIC -fopenmp -Wall -Wno-unused-function -Wno-psabi"
        f"{' -Werror' if cross else ''} {incs} {' '.join(cxx_extra)}",
        "rule cxx",
        f"  command = $cxx -MMD -MF $out.d $cxxflags $extra {'-S' if cross else '-c'} $in -o $out",
        "  depfile = $out.d",
        "  deps = gcc",
        "  description = CXX $in",
    ]
    torch_lib = Path(torch.__file__).parent / "lib"
    libs = f"-L{shlex.quote(str(torch_lib))} -lc10 -ltorch -ltorch_cpu -fopenmp"
    if backend == "cuda":
        lines += [
            "nvcc = nvcc",
            f"gencode = {gencode(archs)}",
            f"nvccflags = {common} --expt-relaxed-constexpr -Xcompiler -fPIC "
            f"-Xptxas -warn-spills {incs} {' '.join(cuda_extra)}",
            "rule nvcc",
            # ptxas's register/spill report is kept beside each object (tests read it).
            # $gencode in the command, not in nvccflags: ninja expands top-level
            # variables where they are defined, build-level overrides only here.
            "  command = $nvcc -MD -MF $out.d $nvccflags $gencode -Xptxas -v -c $in -o $out 2> $out.log"
            " || { cat $out.log >&2; exit 1; }",
            "  depfile = $out.d",
            "  deps = gcc",
            "  description = NVCC $in",
        ]
        libs += f" -ltorch_cuda -lc10_cuda -L{shlex.quote(str(cuda_home() / 'lib64'))} -lcudart"
    if backend == "rocm":
        lines += hip_rules(work, [root / i for i in dict.fromkeys(includes)], macro, hip_extra)
    lines += [
        "rule link",
        f"  command = $cxx -shared -o $out $in {libs}",
        "  description = LINK $out",
    ]

    objs = []
    for src in torch_sources + kernel_sources:
        if src.endswith(".hip"):
            for arch in archs:  # device assembly per arch (compile-only: nothing links it)
                obj = f"obj/{src.replace('/', '_')}.{arch}.s"
                lines += [f"build {obj}: hip {shlex.quote(str(root / src))}", f"  arch = {arch}"]
                objs.append(obj)
            continue
        if not src.endswith((".cpp", ".cc", ".cu")):
            continue  # headers are tracked through the depfiles
        if src.endswith(".cpp") and backend == "rocm" and not host_cuda:
            continue  # no CUDA headers for the c10/cuda wrappers: only the device code
        obj = f"obj/{src.replace('/', '_')}.{'s' if cross else 'o'}"
        rule = "nvcc" if src.endswith(".cu") else "cxx"
        lines.append(f"build {obj}: {rule} {shlex.quote(str(root / src))}")
        if src in cu_archs and cu_archs[src] != archs:
            lines.append(f"  gencode = {gencode(cu_archs[src])}")
        if src in torch_sources:
            # Only the binding names the extension: a new id recompiles it alone.
            lines.append(f"  extra = -DTORCH_EXTENSION_NAME={ext_id}")
        objs.append(obj)
    if compile_only:
        lines.append(f"default {' '.join(objs)}")
    else:
        lines.append(f"build {ext_id}.abi3.so: link {' '.join(objs)}")
        lines.append(f"default {ext_id}.abi3.so")
    return "\n".join(lines) + "\n"


def file_digest(variant_dir: Path) -> dict:
    """sha256 of every file but metadata.json and bytecode, as kernels.Digest hashes."""
    files = {}
    for path in sorted(variant_dir.rglob("*")):
        rel = path.relative_to(variant_dir).as_posix()
        if path.is_dir() or rel == "metadata.json" or "__pycache__" in path.parts:
            continue
        files[rel] = base64.b64encode(hashlib.sha256(path.read_bytes()).digest()).decode()
    return {"algorithm": "sha256", "files": files}


def build(root: Path, backend: str | None, jobs: int | None, verbose: bool,
          compile_only: bool = False) -> Path:
    torch = _require_torch()
    config = read_config(root)
    backend = pick_backend(backend, torch, compile_only)
    if backend not in [b for b in config["general"]["backends"]]:
        raise BuildError(f"build.toml does not list the {backend} backend")
    ninja = shutil.which("ninja")
    if not ninja:
        raise BuildError("ninja not found: `pip install ninja` (requirements.txt pins it)")

    name = config["general"]["name"]
    python_name = name.replace("-", "_")
    sources = list(config["torch"]["src"])
    for kernel in config.get("kernel", {}).values():
        if kernel.get("backend") == backend:
            sources += kernel["src"]
    tree, dirty = source_hash(root, sources)
    ext_id = f"_{python_name}_{backend}_{tree}" + ("_dirty" if dirty else "")
    variant = f"compile-only-{backend}" if compile_only else variant_name(torch, backend)
    archs = {"cuda": lambda: cuda_archs(config, torch), "rocm": lambda: rocm_archs(config)}.get(
        backend, list)()

    work = root / "build" / "_work" / variant
    write_if_changed(work / "gen" / "registration.h", REGISTRATION_H)
    write_if_changed(work / "build.ninja", ninja_file(root=root, work=work, torch=torch, backend=backend,
                                                      ext_id=ext_id, config=config, archs=archs,
                                                      compile_only=compile_only))
    cmd = [ninja, "-C", str(work)] + (["-j", str(jobs)] if jobs else []) + (["-v"] if verbose else [])
    proc = subprocess.run(cmd)
    if proc.returncode != 0:
        raise BuildError(f"compilation failed (ninja exit {proc.returncode}); the compiler's messages are above")
    if compile_only:
        return work

    out = root / "build" / variant
    if out.exists():
        shutil.rmtree(out)
    pkg = root / "torch-ext" / python_name
    shutil.copytree(pkg, out, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(work / f"{ext_id}.abi3.so", out / f"{ext_id}.abi3.so")
    (out / "_ops.py").write_text(OPS_PY.format(id=ext_id))

    backend_info = {"type": backend}
    if archs:
        backend_info["archs"] = archs
    metadata = {
        "id": ext_id,
        "name": name,
        "version": config["general"]["version"],
        "license": config["general"]["license"],
        "python-depends": config["general"].get("python-depends", []),
        "backend": backend_info,
        "digest": file_digest(out),
    }
    (out / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=BACKENDS, help="default: the backend of the installed torch")
    p.add_argument("-j", "--jobs", type=int, help="parallel compile jobs (ninja's default otherwise)")
    p.add_argument("-v", "--verbose", action="store_true", help="print compiler command lines")
    p.add_argument("--compile-only", action="store_true",
                   help="compile the backend's sources without linking (e.g. CUDA with a CPU torch, "
                        "ROCm to gfx assembly, the CPU sources to aarch64 assembly); objects, ptxas "
                        "reports and .s files land in build/_work/compile-only-<backend>/")
    p.add_argument("--print-variant", action="store_true",
                   help="print the variant directory this torch would load, and exit")
    args = p.parse_args(argv)
    try:
        if args.print_variant:
            torch = _require_torch()
            print(variant_name(torch, pick_backend(args.backend, torch)))
            return 0
        out = build(ROOT, args.backend, args.jobs, args.verbose, args.compile_only)
    except BuildError as e:
        print(f"build error: {e}", file=sys.stderr)
        return 1
    print(f"built {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
