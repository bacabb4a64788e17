"""The CPU sources cross-compiled for aarch64 and read as assembly.

kernel-builder builds the CPU backend for aarch64-linux too, where none of the AVX2 /
AVX-512 loops exist and every op runs at::vec's portable types. No aarch64 machine here:
`tools/build.py --backend cpu --compile-only` compiles every CPU source of build.toml with
Debian's aarch64-linux-gnu-g++ to assembly, warnings as errors, and this test reads it:
the 16-bit row loops convert with NEON (`fcvtl`) and multiply in vector registers, not an
element at a time. Nothing is linked or run. Skips without the cross compiler unless CI
is set (`make test` installs it first: `make cross-toolchain`).
"""

import re

import pytest
import tomllib

from conftest import ROOT, compile_only

@pytest.fixture(scope="module")
def asm():
    obj = compile_only("cpu", "cross-toolchain")
    # obj/<source path, '/' as '_'>.s, keyed by the file's stem: cpu_kernels_rms_norm.cpp.s -> rms_norm
    return {re.sub(r"^(cpu_kernels|torch-ext)_", "", f.name.removesuffix(".cpp.s")): f.read_text()
            for f in obj.glob("*.cpp.s")}


def count(text: str, pattern: str) -> int:
    return len(re.findall(pattern, text, re.M))


def test_every_cpu_source_compiles(asm):
    config = tomllib.loads((ROOT / "build.toml").read_text())
    sources = [src for k in config["kernel"].values() if k.get("backend") == "cpu" for src in k["src"]]
    names = {s.rsplit("/", 1)[1].removesuffix(".cpp") for s in sources + config["torch"]["src"]
             if s.endswith(".cpp")}
    assert names <= set(asm), f"no aarch64 assembly for {sorted(names - set(asm))}"


@pytest.mark.parametrize("family", ["rms_norm", "layer_norm", "activation"])
def test_row_loops_are_neon(asm, family):
    text = asm[family]
    # fp16 <-> fp32 a vector at a time, and the fp32 arithmetic on vector registers.
    assert count(text, r"^\tfcvtl2?\tv\d+\.4s, v\d+\.[48]h") > 0, "no NEON fp16 -> fp32 conversion"
    assert count(text, r"^\tfcvtn2?\tv\d+\.[48]h, v\d+\.4s") > 0, "no NEON fp32 -> fp16 conversion"
    assert count(text, r"^\tfmul\tv\d+\.4s") > 0, "no vector multiply"


@pytest.mark.parametrize("family", ["q4k", "matmul", "skinny_gemm"])
def test_dot_products_are_neon(asm, family):
    assert count(asm[family], r"^\tf(mul|mla)\tv\d+\.4s") > 0, "no vector multiply"
