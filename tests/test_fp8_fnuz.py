"""The float8_e4m3fnuz encoder and decoder of common/fp8.h (what the ROCm kernels write),
against torch's own float8_e4m3fnuz. The header is compiled here for the host into a
tiny shared library and called through ctypes: the same integer code runs on the device.
"""

import ctypes

import pytest
import torch

from reference import header_lib

FNUZ = torch.float8_e4m3fnuz
WRAPPER = """
#include "fp8.h"
using namespace inference_kernels;
extern "C" unsigned char encode(float v) { return fp8_fnuz_from_float(v); }
extern "C" float decode(unsigned char b) { return fp8_fnuz_to_float(b); }
extern "C" void encode_n(const float* v, unsigned char* out, long n) {
  for (long i = 0; i < n; ++i) out[i] = fp8_fnuz_from_float(v[i]);
}
extern "C" float fnuz_max() { return kFp8FnuzMax; }
extern "C" float fnuz_scale(float absmax) { return dynamic_fp8_fnuz_scale(absmax); }
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    lib = header_lib(tmp_path_factory.mktemp("fnuz"), WRAPPER)
    lib.encode.restype, lib.encode.argtypes = ctypes.c_ubyte, [ctypes.c_float]
    lib.decode.restype, lib.decode.argtypes = ctypes.c_float, [ctypes.c_ubyte]
    lib.encode_n.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
    lib.fnuz_max.restype = ctypes.c_float
    lib.fnuz_scale.restype, lib.fnuz_scale.argtypes = ctypes.c_float, [ctypes.c_float]
    return lib


def encode(lib, v: torch.Tensor) -> torch.Tensor:
    v = v.to(torch.float32).contiguous()
    out = torch.empty(v.shape, dtype=torch.uint8)
    lib.encode_n(v.data_ptr(), out.data_ptr(), v.numel())
    return out


def torch_bits(v: torch.Tensor) -> torch.Tensor:
    return v.to(torch.float32).to(FNUZ).view(torch.uint8)


def test_decode_all_256_codes(lib):
    want = torch.arange(256, dtype=torch.uint8).view(FNUZ).float()
    got = torch.tensor([lib.decode(b) for b in range(256)])
    assert torch.equal(got.isnan(), want.isnan()) and want.isnan().sum() == 1  # only 0x80
    assert torch.equal(got[~got.isnan()], want[~want.isnan()])
    assert lib.fnuz_max() == want.nan_to_num(0).max() == 240.0


def test_encode_round_trips_every_code(lib):
    codes = torch.arange(256, dtype=torch.uint8)
    vals = codes.view(FNUZ).float()
    assert torch.equal(encode(lib, vals), codes)


def test_encode_random_and_edge_values(lib):
    rand = torch.cat([
        torch.randn(1 << 20) * 60,                                  # the normal range
        torch.randn(1 << 18) * 2.0 ** -9,                           # fp8 subnormals
        torch.exp2(torch.empty(1 << 18).uniform_(-30, 12)) * torch.randn(1 << 18).sign(),
        torch.randint(0, 1 << 32, (1 << 18,), dtype=torch.int64).to(torch.int32).view(torch.float32),
    ])
    codes = torch.arange(256, dtype=torch.uint8).view(FNUZ).float()
    finite = codes[~codes.isnan()].unique()
    mids = (finite[1:] + finite[:-1]) / 2  # exact ties (all representable in fp32)
    edges = torch.tensor([0.0, -0.0, 2.0 ** -10, 2.0 ** -11, -2.0 ** -11, 3 * 2.0 ** -11, 2.0 ** -7,
                          1e-45, -1e-45, 239.9, 240.0, -240.0, 247.99, -247.99, 1e-38])
    v = torch.cat([rand, mids, mids.nextafter(torch.tensor(float("inf"))),
                   mids.nextafter(torch.tensor(float("-inf"))), edges])
    v = v[~v.isnan() & (v.abs() < 248)]  # torch saturates nothing: overflow is checked below
    got, want = encode(lib, v), torch_bits(v)
    bad = (got != want).nonzero().flatten()
    assert bad.numel() == 0, [(v[i].item(), got[i].item(), want[i].item()) for i in bad[:10]]


def test_overflow_saturates_nan_and_negative_zero(lib):
    """Overflow saturates to +-240 (torch's cast gives NaN there; the kernels clamp first,
    so both agree on what the kernels write); NaN -> 0x80; -0 and tiny negatives -> +0."""
    for v in (248.0, 1e6, 3.4e38, float("inf")):
        assert lib.encode(v) == 0x7F and lib.encode(-v) == 0xFF
        assert torch_bits(torch.tensor(min(v, 240.0))).item() == 0x7F
    for nan in (float("nan"), -float("nan")):
        assert lib.encode(nan) == 0x80 == torch_bits(torch.tensor(nan)).item()
    for z in (-0.0, -1e-30, -2.0 ** -11):
        assert lib.encode(z) == 0 == torch_bits(torch.tensor(z)).item()


def test_dynamic_scale_uses_fnuz_max(lib):
    assert lib.fnuz_scale(480.0) == 2.0
    assert lib.fnuz_scale(0.0) == pytest.approx(1 / (240 * 512))
    assert lib.fnuz_scale(float("nan")) != lib.fnuz_scale(float("nan"))
