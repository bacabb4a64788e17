"""The ROCm FP8 GEMM's numerics on the CPU (rocm_kernels/skinny_gemm.hip; no AMD GPU here).

Its operands are float8_e4m3fnuz. gfx942's fp8 MFMA reads them natively; gfx90a has no
fp8 and decodes them with the integer routines of common/fp8.h (value / 128 as f16 bits,
NaN restored on a rare branch), then multiplies by 128 in f16. Those routines are
compiled here for the host and checked over every code at every byte position against
torch's float8_e4m3fnuz -> float16 cast. Then the kernel's summation (fp32 partials per
64-byte chunk, per wave over its K range, waves added in order) is emulated on fnuz
operands decoded that way and held to the fp64 reference with test_skinny_gemm.py's
tolerance.
"""

import ctypes

import pytest
import torch

from reference import header_lib

FNUZ = torch.float8_e4m3fnuz
ROW_TOL = 1e-2  # as tests/test_skinny_gemm.py
WRAPPER = """
#include <cstdint>
#include "fp8.h"
using namespace inference_kernels;
// The integer part of the gfx90a path's to_f16: n bytes (n % 4 == 0) -> n f16 bit patterns
// of value / 128, NaN restored where the word holds one.
extern "C" void decode_f16_div128(const uint8_t* in, uint16_t* out, long n) {
  for (long i = 0; i < n; i += 4) {
    const uint32_t v = uint32_t(in[i]) | uint32_t(in[i + 1]) << 8 | uint32_t(in[i + 2]) << 16 |
                       uint32_t(in[i + 3]) << 24;
    uint32_t f[2] = {fp8_fnuz_x2_to_f16x2_div128(v), fp8_fnuz_x2_to_f16x2_div128(v >> 16)};
    if (fp8_fnuz_x4_nan_bits(v)) {
      f[0] = fp8_fnuz_f16x2_restore_nan(f[0]);
      f[1] = fp8_fnuz_f16x2_restore_nan(f[1]);
    }
    for (int j = 0; j < 4; ++j) out[i + j] = uint16_t(f[j / 2] >> (16 * (j % 2)));
  }
}
extern "C" void nan_bits_n(const uint32_t* v, uint8_t* out, long n) {
  for (long i = 0; i < n; ++i) out[i] = fp8_fnuz_x4_nan_bits(v[i]) != 0;
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    lib = header_lib(tmp_path_factory.mktemp("fnuz_gemm"), WRAPPER)
    lib.decode_f16_div128.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
    lib.nan_bits_n.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
    return lib


def gfx90a_decode(lib, codes: torch.Tensor) -> torch.Tensor:
    """fnuz bytes -> float16 as the gfx90a path computes them (integer routine, then x 128
    in f16)."""
    flat = codes.contiguous().view(torch.uint8).flatten()
    assert flat.numel() % 4 == 0
    bits = torch.empty(flat.numel(), dtype=torch.int16)
    lib.decode_f16_div128(flat.data_ptr(), bits.data_ptr(), flat.numel())
    return (bits.view(torch.float16) * torch.tensor(128.0, dtype=torch.float16)).reshape(codes.shape)


def same_f16(got: torch.Tensor, want: torch.Tensor) -> bool:
    return torch.equal(got.isnan(), want.isnan()) and torch.equal(
        got[~got.isnan()].view(torch.int16), want[~want.isnan()].view(torch.int16))


def test_decode_every_code_at_every_byte_position(lib):
    """All 256 codes in each of the 4 byte positions of a word, beside random neighbours
    and beside the NaN (a NaN must not disturb its neighbours)."""
    codes = torch.arange(256, dtype=torch.uint8)
    for pos in range(4):
        for fill in ("random", "nan", "zero"):
            words = {"random": torch.randint(0, 256, (256, 4), dtype=torch.uint8),
                     "nan": torch.full((256, 4), 0x80, dtype=torch.uint8),
                     "zero": torch.zeros((256, 4), dtype=torch.uint8)}[fill]
            words[:, pos] = codes
            got = gfx90a_decode(lib, words)
            want = words.view(FNUZ).to(torch.float16)  # exact: fnuz fits in f16
            assert same_f16(got, want), (pos, fill)
    # Nothing but 0x80 decodes to NaN, and no code to -0 (fnuz has none).
    got = gfx90a_decode(lib, codes)
    assert got.isnan().nonzero().flatten().tolist() == [0x80]
    assert not (got.view(torch.int16) == -32768).any()


def test_nan_word_test_is_exact(lib):
    """fp8_fnuz_x4_nan_bits is non-zero exactly when a byte is 0x80 (the zero-byte trick's
    stray bits never make a NaN-free word look like one)."""
    rand = torch.randint(0, 1 << 32, (1 << 20,), dtype=torch.int64).to(torch.int32)
    near = torch.tensor([0x80, 0x81, 0x7F, 0x00, 0x01, 0xFF], dtype=torch.uint8)
    crafted = near[torch.cartesian_prod(*[torch.arange(6)] * 4)].view(torch.int32).flatten()
    words = torch.cat([rand, crafted])
    out = torch.empty(words.numel(), dtype=torch.uint8)
    lib.nan_bits_n(words.data_ptr(), out.data_ptr(), words.numel())
    want = (words.view(torch.uint8).reshape(-1, 4) == 0x80).any(dim=1)
    assert torch.equal(out.bool(), want)


def rand_fnuz(shape, std=3.0):
    return (torch.randn(shape) * std).clamp(-240, 240).to(FNUZ)


def emulate_rocm_gemm(lib, a, b, sa, sb, bias, out_dtype):
    """skinny_gemm.hip's order: each wave sums its K range chunk by chunk (64 bytes,
    products of the decoded values in fp32), the waves' partials are added in wave order,
    then scale, bias and one rounding. The MFMA's order inside a chunk is the hardware's;
    here a chunk is one fp32 matmul."""
    M, K = a.shape
    af, bf = gfx90a_decode(lib, a).float(), gfx90a_decode(lib, b).float()
    nchunks = (K + 63) // 64
    waves = min(max(nchunks // 4, 1), 16)
    total = torch.zeros(M, b.shape[0])
    for w in range(waves):
        part = torch.zeros(M, b.shape[0])
        for c in range(w * nchunks // waves, (w + 1) * nchunks // waves):
            part += af[:, 64 * c:64 * c + 64] @ bf[:, 64 * c:64 * c + 64].T
        total += part
    y = total * (sa * sb.reshape(1, -1))
    return (y if bias is None else y + bias.float()).to(out_dtype)


@pytest.mark.parametrize("m,n,k", [(1, 37, 1040), (5, 64, 4096), (17, 33, 272), (32, 16, 64)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_emulated_gemm_on_fnuz_operands(lib, m, n, k, out_dtype):
    a, b = rand_fnuz((m, k)), rand_fnuz((n, k))
    sa = torch.rand(1) / 16 + 1 / 32
    sb = torch.rand(n) / 16 + 1 / 32
    bias = torch.randn(n).to(out_dtype)
    got = emulate_rocm_gemm(lib, a, b, sa, sb, bias, out_dtype).double()
    ref = (a.double() @ b.double().T) * sa.double() * sb.double().reshape(1, -1) + bias.double()
    err = ((got - ref).norm(dim=1) / ref.norm(dim=1).clamp_min(1e-30)).max().item()
    assert err < ROW_TOL, err


def test_emulated_gemm_propagates_nan(lib):
    """An fnuz NaN (0x80) in a weight row poisons that output column, in an activation row
    that output row, as on the CPU (NaN * 0 is NaN too); nothing else."""
    a, b = rand_fnuz((4, 256)), rand_fnuz((8, 256))
    a.view(torch.uint8)[1, 100] = 0x80
    b.view(torch.uint8)[5, 7] = 0x80
    y = emulate_rocm_gemm(lib, a, b, torch.ones(1), torch.ones(8), None, torch.bfloat16)
    want = torch.zeros(4, 8, dtype=torch.bool)
    want[1, :] = True
    want[:, 5] = True
    assert torch.equal(y.isnan(), want)
