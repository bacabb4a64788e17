"""Tests load the built variant exactly as users do: kernels.get_kernel + LOCAL_KERNELS.

`make test` builds the variant first (tools/build.py). On a CUDA machine the CUDA
variant is loaded and the CPU cases skip; on a CPU machine the reverse.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
REPO_ID = "inference-kernels/inference-kernels"

os.environ.setdefault("LOCAL_KERNELS", f"{REPO_ID}={ROOT / 'build'}")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

GPU = torch.cuda.is_available() and torch.version.cuda is not None


def compile_only(backend: str, toolchain: str) -> Path:
    """`tools/build.py --backend BACKEND --compile-only`; its object directory. Without the
    toolchain the builder names the make target that installs it: skip, unless CI is set
    (`make test` installs every toolchain first)."""
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "build.py"), "--backend", backend,
                           "--compile-only"], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode and f"make {toolchain}" in proc.stderr and not os.environ.get("CI"):
        pytest.skip(proc.stderr.strip())  # the builder's one line: what to install
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return ROOT / "build" / "_work" / f"compile-only-{backend}" / "obj"


def loaded_backend() -> str:
    return "cuda" if GPU else "cpu"


@pytest.fixture(scope="session")
def ik():
    import kernels

    try:
        return kernels.get_kernel(REPO_ID, version=1)
    except FileNotFoundError as e:
        pytest.fail(f"no build for this machine; run `make build` first.\n{e}")


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    if request.param != loaded_backend():
        why = ("no CUDA GPU here" if request.param == "cuda"
               else "the CUDA variant holds only CUDA kernels (CPU runs in CI)")
        pytest.skip(why)
    return request.param


@pytest.fixture(autouse=True)
def _fresh_seed(request):
    # A fresh, reported seed per test: new random inputs every run, reproducible on failure.
    seed = int.from_bytes(os.urandom(4), "little")
    torch.manual_seed(seed)
    request.node.user_properties.append(("seed", seed))
    yield
