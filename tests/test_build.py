"""The build as kernel-builder and the `kernels` library see it."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import GPU, ROOT

BUILDER = ROOT / "tools" / "build.py"


def variant_dir() -> Path:
    name = subprocess.run([sys.executable, str(BUILDER), "--print-variant"], check=True,
                          capture_output=True, text=True).stdout.strip()
    return ROOT / "build" / name


def test_build_toml_accepted_by_kernel_builder_parser():
    from kernels._rust import Backend, Build

    build = Build.open(ROOT)
    assert set(build.general.backends) == {Backend.CPU, Backend.CUDA, Backend.ROCm, Backend.Metal}


def quoted_includes(path: Path, seen: set) -> set:
    """Repository files that `path` includes with #include "...", transitively (looked up
    beside the file, then in common/ and torch-ext/, as the build's -I flags do)."""
    if path in seen or not path.is_file():
        return seen
    seen.add(path)
    for name in re.findall(r'#include "([^"]+)"', path.read_text()):
        for d in (path.parent, ROOT / "common", ROOT / "torch-ext"):
            if (d / name).is_file():
                quoted_includes((d / name).resolve(), seen)
                break
    return seen


def test_every_included_header_is_a_listed_source():
    """kernel-builder copies, and tools/build.py hashes into the variant's id, only the
    files build.toml lists: a header that a backend's sources include but no kernel of
    that backend lists would be missing there, or leave a stale local build."""
    import tomllib

    config = tomllib.loads((ROOT / "build.toml").read_text())
    torch_src = {(ROOT / s).resolve() for s in config["torch"]["src"]}
    listed, included = {}, {}
    for kernel in config["kernel"].values():
        b = kernel["backend"]
        listed.setdefault(b, set()).update((ROOT / s).resolve() for s in kernel["src"])
        for s in kernel["src"]:
            if s.endswith((".cu", ".cpp", ".hip", ".mm", ".metal")):
                quoted_includes((ROOT / s).resolve(), included.setdefault(b, set()))
    for b, files in included.items():
        missing = sorted(str(f.relative_to(ROOT)) for f in files - listed[b] - torch_src)
        assert not missing, f"{b}: included but not in build.toml: {missing}"


def test_variant_name_follows_torch():
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    backend = f"cu{torch.version.cuda.replace('.', '')[:3]}" if GPU else "cpu"
    assert variant_dir().name == f"torch{major}{minor}-cxx11-{backend}-x86_64-linux"


def test_metadata_and_digest():
    from kernels._rust import Digest, DigestAlgorithm, Metadata

    vdir = variant_dir()
    meta = Metadata.read_from_file(vdir / "metadata.json")
    assert str(meta.name) == "inference-kernels" and meta.version == 1
    assert meta.license == "Apache-2.0"
    assert re.fullmatch(r"_inference_kernels_(cpu|cuda)_[0-9a-f]{7}(_dirty)?", meta.id)
    assert (vdir / f"{meta.id}.abi3.so").is_file()
    assert (vdir / "_ops.py").read_text().count(meta.id) >= 2
    if GPU:
        assert "9.0" in meta.backend.archs
    # Our digest must be the one the library computes itself.
    assert meta.digest is not None
    meta.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, vdir))


def test_registration_header_not_in_source_tree():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "registration.h" not in tracked
    assert not list((ROOT / "torch-ext").rglob("registration.h"))


def test_abi3_and_manylinux_report():
    """abi3 must hold. manylinux_2_28: local builds on Debian 12 pick up one glibc 2.32
    symbol from libstdc++'s headers; anything else is a regression (see README)."""
    import kernel_abi_check as kac

    so = next(variant_dir().glob("*.abi3.so"))
    obj = kac.ObjectFile(so)
    assert obj.check_python_abi("3.9") == []
    extra = {f"{v.name} ({v.dep} {v.version})" for v in obj.check_manylinux("manylinux_2_28")}
    print("manylinux_2_28 violations:", sorted(extra))
    if not GPU:  # the CPU variant is what CI builds on Debian 12
        assert extra <= {"__libc_single_threaded (GLIBC 2.32)"}, sorted(extra)


def run_builder(*args, pre=""):
    code = f"{pre}import runpy, sys; sys.argv = ['build.py', *{list(args)!r}]; runpy.run_path({str(BUILDER)!r}, run_name='__main__')"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)


def test_builder_one_line_errors():
    no_torch = run_builder(pre="import sys; sys.modules['torch'] = None; ")
    assert no_torch.returncode == 1
    assert no_torch.stderr.strip() == ("build error: torch is not installed: run `make build` "
                                       "(it creates .venv) or `pip install -r requirements.txt`")
    metal = run_builder("--backend", "metal")
    assert metal.returncode == 1 and len(metal.stderr.strip().splitlines()) == 1
    assert "does not build the metal backend" in metal.stderr
    if not GPU:
        cuda = run_builder("--backend", "cuda")
        assert cuda.returncode == 1 and "CUDA build of torch" in cuda.stderr
    # The aarch64 compile-only build without its cross compiler (hidden from shutil.which).
    cross = run_builder("--backend", "cpu", "--compile-only",
                        pre="import shutil; w = shutil.which; shutil.which = lambda c, *a, **k: "
                            "None if c.startswith('aarch64-') else w(c, *a, **k); ")
    assert cross.returncode == 1 and cross.stderr.strip() == (
        "build error: aarch64-linux-gnu-g++ is missing: run `make cross-toolchain` "
        "(apt-get install g++-aarch64-linux-gnu)")


def test_builder_is_incremental():
    """A second build with nothing changed compiles nothing."""
    for _ in range(2):
        proc = subprocess.run([sys.executable, str(BUILDER)], capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
    assert "no work to do" in proc.stdout


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_sources_compile_without_spills():
    """Every CUDA kernel compiles for sm_90 here (no GPU needed) with no local-memory spills."""
    proc = subprocess.run([sys.executable, str(BUILDER), "--backend", "cuda", "--compile-only"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    logs = sorted((ROOT / "build" / "_work" / "compile-only-cuda" / "obj").glob("*.cu.o.log"))
    assert logs, "no ptxas report found"
    for log in logs:
        report = log.read_text()
        print(log.name, *[ln.strip() for ln in report.splitlines() if "Used" in ln or "spill" in ln], sep="\n  ")
        frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", report)
        assert frames, f"{log.name}: no kernels in the ptxas report"
        assert all(f == ("0", "0", "0") for f in frames), f"{log.name}: a kernel spills or uses a stack frame"
