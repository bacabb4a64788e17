"""The ROCm kernels compiled for gfx942 (MI300X) and gfx90a (MI200) and read as assembly.

No AMD GPU here: `tools/build.py --backend rocm --compile-only` turns every .hip file of
build.toml into device assembly per arch (Debian's clang-19), and this test reads it:
16-byte loads on the vector paths, wave64, no scratch and no spills, and register use
that leaves at least 4 waves per SIMD; the FP8 GEMM's MFMA instructions (fp8 on gfx942,
f16 on gfx90a), its LDS ring, barriers, loads in flight and split-K fences. Skips without the toolchain unless CI is set
(`make test` installs it first: `make rocm-toolchain`).
"""

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, compile_only

OBJ = ROOT / "build" / "_work" / "compile-only-rocm" / "obj"
ARCHS = ("gfx942", "gfx90a")
MAX_VGPRS = 128  # 512 VGPRs per SIMD lane / 4 waves
# A spill or any private-memory access shows up as a scratch instruction (gfx942) or
# a buffer access through the private segment (gfx90a).
SCRATCH = re.compile(r"^\s+(scratch_(load|store)\w*|buffer_(load|store)\w*)\s", re.M)


@pytest.fixture(scope="module")
def asm():
    compile_only("rocm", "rocm-toolchain")
    return {(f.name.split(".")[0].removeprefix("rocm_kernels_"), f.name.split(".")[-2]): f.read_text()
            for f in OBJ.glob("*.hip.*.s")}


def kernels(text: str) -> list[dict]:
    """Each kernel's metadata (the amdhsa YAML note), plus its instructions as `body`."""
    note = text.split(".amdgpu_metadata", 1)[1].split(".end_amdgpu_metadata")[0]
    meta = yaml.safe_load(note.split("\n...")[0])  # the YAML document ends at "..."
    out = []
    for k in meta["amdhsa.kernels"]:
        start = text.index(f"\n{k['.name']}:")
        k["body"] = text[start:text.index(".Lfunc_end", start)]
        out.append(k)
    return out


def vector_width(name: str) -> int:
    return int(re.search(r"Li(\d+)E", name).group(1))  # the VEC template argument


def short(name: str) -> str:
    filt = shutil.which("llvm-cxxfilt-19") or shutil.which("c++filt")
    full = subprocess.run([filt, name], capture_output=True, text=True).stdout.strip() if filt else name
    full = full[:full.rfind(">(") + 1] or full  # drop the parameter list
    return re.sub(r"^void |\(anonymous namespace\)::|inference_kernels::(rocm::)?", "", full)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("family", ["rms_norm", "activation", "layer_norm"])
def test_isa(asm, family, arch):
    text = asm[(family, arch)]
    ks = kernels(text)
    # every dtype/mode/path (layer_norm: 3 dtypes x vector/scalar x cached/streamed)
    assert len(ks) == {"rms_norm": 36, "activation": 18, "layer_norm": 12}[family]
    print(f"\n{family} {arch}: kernel  VGPRs  AGPRs  SGPRs")
    for k in ks:
        name = k[".name"]
        print(f"  {short(name)}  {k['.vgpr_count']}  {k['.agpr_count']}  {k['.sgpr_count']}")
        assert k[".wavefront_size"] == 64, name
        assert k[".private_segment_fixed_size"] == 0, f"{name} uses scratch"
        assert k[".vgpr_spill_count"] == 0 and k[".sgpr_spill_count"] == 0, f"{name} spills"
        assert not SCRATCH.search(k["body"]), f"{name}: {SCRATCH.search(k['body']).group(0)}"
        assert k[".vgpr_count"] + k[".agpr_count"] <= MAX_VGPRS, f"{name}: fewer than 4 waves/SIMD"
        if vector_width(name) > 1:  # the aligned-row path moves 16 bytes a load
            assert "global_load_dwordx4" in k["body"], f"{name}: no 16-byte load"
    assert ".amdhsa_wavefront_size32" not in text
    assert f"amdgcn-amd-amdhsa--{arch}" in text


def gemm_shape(name: str) -> tuple[int, int] | None:
    """(NW, MT) of a skinny_gemm_kernel<OutT, NW, MT>, None for the byte kernel."""
    m = re.search(r"Li(\d)ELi(\d)EE", name)
    return (int(m.group(1)), int(m.group(2))) if "skinny_gemm_kernel" in name and m else None


def plan_constant(name: str) -> int:
    text = (ROOT / "rocm_kernels" / "skinny_gemm_plan.h").read_text()
    return int(re.search(rf"constexpr int {name} = (\d+);", text).group(1))


def loops(body: str) -> list[str]:
    """Each loop of a kernel: from a label to the last branch back to it."""
    out = []
    for m in re.finditer(r"^(\.LBB\w+):", body, re.M):
        back = list(re.finditer(rf"^\s+s_(?:cbranch_\w+|branch) {re.escape(m.group(1))}$", body[m.end():], re.M))
        if back:
            out.append(body[m.start():m.end() + back[-1].end()])
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_skinny_gemm_isa(asm, arch):
    """The FP8 GEMM (rocm_kernels/skinny_gemm.hip): fp8 MFMA on gfx942 (the fnuz bytes as
    loaded), f16 MFMA on gfx90a (no fp8 there), wave64, no scratch. Its design: one block
    of 12 waves per CU (3 waves per SIMD: at most 168 VGPRs + AGPRs), the weight streamed in
    16-byte loads by producer waves through an LDS ring (ds_write_b128 / ds_read_b128, all
    within the 64 KB of a CU) to MFMA consumer waves that touch no global memory in their
    loop, one s_barrier per step, and the producers' loads kept in flight across it
    (their loop never waits for fewer than kDepth - 1 steps of loads); the split-K
    arrival through a device-scope atomic between release and acquire fences."""
    text = asm[("skinny_gemm", arch)]
    ks = kernels(text)
    assert len(ks) == 2 * (4 + 1)  # 2 out dtypes x ((NW, MT) in {1, 2}^2 + the byte kernel)
    mfma = {"gfx942": "v_mfma_f32_16x16x32_fp8_fp8", "gfx90a": "v_mfma_f32_16x16x16f16"}[arch]
    producers, consumers = plan_constant("kProducers"), plan_constant("kConsumers")
    depth, step = plan_constant("kDepth"), producers  # kStep = kProducers: a chunk each
    waves = producers + consumers
    budget = 512 // -(-waves // 4) // 8 * 8  # one block per CU: ceil(waves / 4) per SIMD
    print(f"\nskinny_gemm {arch}: kernel  VGPRs  AGPRs  SGPRs  LDS bytes  MFMAs  "
          f"(fast path: {waves} waves a block, one block per CU, {budget} VGPRs allowed)")
    for k in ks:
        name, body = k[".name"], k["body"]
        print(f"  {short(name)}  {k['.vgpr_count']}  {k['.agpr_count']}  {k['.sgpr_count']}  "
              f"{k['.group_segment_fixed_size']}  {body.count('v_mfma')}")
        assert k[".wavefront_size"] == 64, name
        assert k[".private_segment_fixed_size"] == 0, f"{name} uses scratch"
        assert k[".vgpr_spill_count"] == 0 and k[".sgpr_spill_count"] == 0, f"{name} spills"
        assert not SCRATCH.search(body), f"{name}: {SCRATCH.search(body).group(0)}"
        shape = gemm_shape(name)
        if shape is None:  # the byte path: no MFMA, no LDS
            assert k[".vgpr_count"] + k[".agpr_count"] <= MAX_VGPRS, f"{name}: fewer than 4 waves/SIMD"
            assert "v_mfma" not in body, name
            continue
        nw, mt = shape
        q = nw + mt  # 1 KB pieces per 64-byte chunk: nw of weight, mt of activation
        assert k[".max_flat_workgroup_size"] == waves * 64, name
        assert k[".vgpr_count"] + k[".agpr_count"] <= budget, f"{name}: over {budget} VGPRs"
        # The ring (2 slots of kStep chunks) is the kernel's only LDS; the partials reuse it.
        assert k[".group_segment_fixed_size"] == 2 * step * q * 1024 <= 65536, name
        mfmas = re.findall(r"^\s+(v_mfma\w*)", body, re.M)
        assert mfmas and set(mfmas) == {mfma}, f"{name}: {sorted(set(mfmas))}"
        loads = re.findall(r"^\s+(global_load_\w+)", body, re.M)
        # The weight streams in non-temporal 16-byte loads; no operand load is narrower
        # than 16 bytes (the scalars are the scales, the bias, the partials: dword/ushort).
        nt = "nt" if arch == "gfx942" else "glc slc"
        assert re.search(rf"global_load_dwordx4 [^\n]*{nt}$", body, re.M), f"{name}: no streamed weight load"
        assert "global_load_dwordx2" not in loads and "global_load_ubyte" not in loads, f"{name}: {set(loads)}"
        ls = loops(body)
        # Producers: a loop of 16-byte loads and 16-byte LDS writes, kDepth steps a turn.
        prod = [lp for lp in ls if "global_load_dwordx4" in lp and "ds_write_b128" in lp
                and "v_mfma" not in lp and "ds_read" not in lp]
        assert prod, f"{name}: no producer loop"
        lp = min(prod, key=len)
        assert lp.count("global_load_dwordx4") == lp.count("ds_write_b128") == depth * q, name
        assert lp.count("s_barrier") == depth, name
        waits = [int(v) for v in re.findall(r"s_waitcnt\s[^\n]*vmcnt\((\d+)\)", lp)]
        assert waits and min(waits) >= (depth - 1) * q, f"{name}: producer loop drains its loads: {waits}"
        # Consumers: LDS reads and MFMAs, no global memory, one barrier a step.
        cons = [lp for lp in ls if "ds_read_b128" in lp and "v_mfma" in lp]
        assert cons, f"{name}: no consumer loop"
        lp = min(cons, key=len)
        assert "global_" not in lp and "s_barrier" in lp, name
        assert lp.count("ds_read_b128") * (2 if arch == "gfx942" else 4) * nw * mt <= \
            lp.count("v_mfma") * q, f"{name}: an MFMA step without its operands' LDS reads"
        # Split-K arrival: a device-scope atomic add between a release fence (gfx942 writes
        # its XCD's L2 back) and an acquire fence (invalidates L2 / the CU's L1).
        assert re.search(r"global_atomic_add\b", body), f"{name}: no arrival counter"
        fences = ("buffer_wbl2 sc1", "buffer_inv sc1") if arch == "gfx942" else ("buffer_wbinvl1_vol",)
        assert all(f in body for f in fences), f"{name}: no device-scope fences"
    # f16 denormals on: gfx90a's fp8 subnormals pass through f16 subnormals (x 2^-7).
    assert ".amdhsa_float_denorm_mode_16_64 3" in text
    assert f"amdgcn-amd-amdhsa--{arch}" in text


@pytest.mark.parametrize("arch", ARCHS)
def test_isa_kquant_gemv(asm, arch):
    """q4k.hip: every (dtype, M, rows per wave) gemv streams its weight bytes in 16-byte
    loads, runs wave64 without scratch, and stays within the register budget it was
    compiled for (amdgpu_waves_per_eu: 4 waves per SIMD up to M = 3, 3 up to M = 5, 2)."""
    text = asm[("q4k", arch)]
    ks = kernels(text)
    # 3 dtypes x 2 formats x (M = 1 with 2 and 1 rows per wave, M = 2..8 with 1)
    assert len(ks) == 3 * 2 * 9
    print(f"\nq4k {arch}: kernel  VGPRs  AGPRs  SGPRs  LDS bytes")
    for k in ks:
        name = k[".name"]
        m = int(re.search(r"Li(\d+)ELi(\d+)EE", name).group(1))  # <T, M, R>
        budget = 512 // (4 if m <= 3 else 3 if m <= 5 else 2) // 8 * 8
        print(f"  {short(name)}  {k['.vgpr_count']}  {k['.agpr_count']}  {k['.sgpr_count']}  "
              f"{k['.group_segment_fixed_size']}")
        assert k[".wavefront_size"] == 64, name
        assert k[".private_segment_fixed_size"] == 0, f"{name} uses scratch"
        assert k[".vgpr_spill_count"] == 0 and k[".sgpr_spill_count"] == 0, f"{name} spills"
        assert not SCRATCH.search(k["body"]), f"{name}: {SCRATCH.search(k['body']).group(0)}"
        assert k[".vgpr_count"] + k[".agpr_count"] <= budget, f"{name}: over {budget} VGPRs"
        assert "global_load_dwordx4" in k["body"], f"{name}: no 16-byte weight load"
        assert not re.search(r"^\s+flat_load", k["body"], re.M), f"{name}: flat (not global) loads"
        # levels to floats in one instruction each; Q6_K's 2-aligned words shifted in place
        if "q4k" in name:
            assert "v_cvt_f32_ubyte" in k["body"], name
        else:
            assert "v_alignbit_b32" in k["body"], name
    assert ".amdhsa_wavefront_size32" not in text


def test_rocm_host_wrappers_compile(asm):
    """The host side of a ROCm build (the shared c10/cuda wrappers and the binding, with
    ROCM_KERNEL) compiles against this CPU torch's headers, where the CUDA headers they
    include are installed; a ROCm torch serves the same API (hipified)."""
    if not (OBJ / "torch-ext_torch_binding.cpp.o").exists():
        pytest.skip("no CUDA headers here: the ROCm host wrappers were not compiled")
    for src in ("torch-ext_torch_binding.cpp", "cuda_kernels_rms_norm_torch.cpp",
                "cuda_kernels_activation_torch.cpp", "cuda_kernels_layer_norm_torch.cpp",
                "cuda_kernels_skinny_gemm_torch.cpp", "cuda_kernels_q4k_torch.cpp",
                "cpu_kernels_q4k.cpp"):
        assert (OBJ / f"{src}.o").stat().st_size > 0


def test_missing_toolchain_is_one_line_error():
    env = {**os.environ, "PATH": "/nonexistent"}  # no clang++-19 to find
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "build.py"), "--backend", "rocm",
                           "--compile-only"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "make rocm-toolchain" in proc.stderr
