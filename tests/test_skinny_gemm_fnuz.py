"""The ROCm FP8 GEMM's numerics and work split on the CPU (rocm_kernels/skinny_gemm.hip;
no AMD GPU here).

Its operands are float8_e4m3fnuz. gfx942's fp8 MFMA reads them natively; gfx90a has no
fp8 and decodes them with the integer routines of common/fp8.h (value / 128 as f16 bits,
NaN restored on a rare branch), then multiplies by 128 in f16. Those routines are
compiled here for the host and checked over every code at every byte position against
torch's float8_e4m3fnuz -> float16 cast.

The work split is rocm_kernels/skinny_gemm_plan.h, compiled here too: the plan (tiles,
K splits, work items, grid, workspace), each item's K range, the producers' and
consumers' chunks per step and the ring slots. A model of the persistent blocks runs that
code and checks that every (tile, K chunk) is multiplied exactly once, that a consumer
reads each chunk from the slot its producer wrote in the same step and never one being
written, and that the per-tile arrival counter elects exactly one last block, which
then sums the splits in order, whatever the order items finish in. Then the kernel's
summation (fp32 partial per consumer over its chunks, consumers added in order, then the
splits in order) is emulated on fnuz operands decoded as gfx90a does and held to the
fp64 reference with test_skinny_gemm.py's tolerance.
"""

import ctypes
import random

import pytest
import torch

from conftest import ROOT
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
PLAN = """
#include <cstdint>
#include "%s"
using namespace inference_kernels::rocm_gemm;
// make_plan's fields; with force_splits > 0 the split count is overridden after the plan
// (more splits than chunks: items with empty K ranges, which the kernel must survive).
static Plan plan_of(long M, long N, long K, int cus, int tpb, int splits, int force_splits) {
  Plan p = make_plan(M, N, K, cus, tpb, splits);
  if (force_splits > 0) {
    p.splits = force_splits;
    p.items = p.tiles * force_splits;
    p.grid = p.items < cus ? p.items : cus;
  }
  return p;
}
extern "C" void plan(long M, long N, long K, int cus, int tpb, int splits, int force, long* o) {
  const Plan p = plan_of(M, N, K, cus, tpb, splits, force);
  const long v[] = {p.nw, p.mt, p.nchunks, p.n_tiles, p.tiles, p.splits, p.items, p.grid,
                    long(p.workspace), p.fits, kStep, kProducers, kConsumers, kDepth};
  for (int i = 0; i < 14; ++i) o[i] = v[i];
}
// Item `item`: tile, split, c0, c1, n0, m0, steps; then per step s < steps + kDepth + 1:
// the ring slot, kProducers producer chunks, kConsumers x (kStep / kConsumers) consumer chunks.
extern "C" void item(long M, long N, long K, int cus, int tpb, int splits, int force, int it,
                     long* o) {
  const Plan p = plan_of(M, N, K, cus, tpb, splits, force);
  const Item w = item_work(p, it);
  const int steps = item_steps(w);
  const long v[] = {w.tile, w.split, w.c0, w.c1, long(w.n0), long(w.m0), steps};
  int n = 0;
  for (long x : v) o[n++] = x;
  for (int s = 0; s < steps + kDepth + 1; ++s) {
    o[n++] = ring_slot(s);
    for (int q = 0; q < kProducers; ++q) o[n++] = producer_chunk(w, s, q);
    for (int c = 0; c < kConsumers; ++c) {
      for (int j = 0; j < kStep / kConsumers; ++j) o[n++] = consumer_chunk(w, s, c, j);
    }
  }
}
""" % (ROOT / "rocm_kernels" / "skinny_gemm_plan.h")
MI300X_CUS = 304


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


@pytest.fixture(scope="module")
def plan_lib(tmp_path_factory):
    lib = header_lib(tmp_path_factory.mktemp("gemm_plan"), PLAN)
    lib.plan.argtypes = [ctypes.c_long] * 3 + [ctypes.c_int] * 4 + [ctypes.c_void_p]
    lib.item.argtypes = [ctypes.c_long] * 3 + [ctypes.c_int] * 5 + [ctypes.c_void_p]
    return lib


PLAN_FIELDS = ("nw", "mt", "nchunks", "n_tiles", "tiles", "splits", "items", "grid",
               "workspace", "fits", "step", "producers", "consumers", "depth")


def get_plan(plan_lib, m, n, k, cus=MI300X_CUS, tpb=0, splits=0, force=0):
    out = (ctypes.c_long * len(PLAN_FIELDS))()
    plan_lib.plan(m, n, k, cus, tpb, splits, force, out)
    return dict(zip(PLAN_FIELDS, out), args=(m, n, k, cus, tpb, splits, force))


def get_item(plan_lib, pl, it):
    per_step = 1 + pl["producers"] + pl["step"]
    out = (ctypes.c_long * (7 + (pl["nchunks"] // pl["step"] + pl["depth"] + 3) * per_step))()
    plan_lib.item(*pl["args"], it, out)
    tile, split, c0, c1, n0, m0, steps = out[:7]
    rows = [out[7 + s * per_step:7 + (s + 1) * per_step] for s in range(steps + pl["depth"] + 1)]
    return dict(tile=tile, split=split, c0=c0, c1=c1, n0=n0, m0=m0, steps=steps,
                slot=[r[0] for r in rows], prod=[r[1:1 + pl["producers"]] for r in rows],
                cons=[r[1 + pl["producers"]:] for r in rows])


def run_schedule(plan_lib, pl, seed=0):
    """The persistent blocks over the plan's items, as the kernel runs them; returns, per
    tile, the splits in the order the last arriving block sums them, and per (tile, split)
    the chunks each consumer multiplied, in order."""
    P, C, D, S = pl["producers"], pl["consumers"], pl["depth"], pl["step"]
    J = S // C
    items = [get_item(plan_lib, pl, it) for it in range(pl["items"])]
    blocks = {b: list(range(b, pl["items"], pl["grid"])) for b in range(pl["grid"])}
    assert sorted(i for its in blocks.values() for i in its) == list(range(pl["items"]))
    mult = {}
    for it, w in enumerate(items):
        ring = [[None] * S for _ in range(2)]  # (chunk, step) per position of each slot
        steps = w["steps"]
        assert steps == -(-(w["c1"] - w["c0"]) // S)
        barriers = {"producer": 0, "consumer": 0}
        if steps:  # prologue: step 0 into its slot
            for p in range(P):
                ring[w["slot"][0]][p] = (w["prod"][0][p], 0)
        barriers["producer"] += 1
        barriers["consumer"] += 1
        chunks = [[] for _ in range(C)]
        for s in range(steps):
            # Producers write step s + 1 while consumers read step s: never the same slot.
            assert w["slot"][s + 1] != w["slot"][s]
            for c in range(C):
                for j in range(J):
                    ch = w["cons"][s][c * J + j]
                    if ch >= w["c1"]:
                        break
                    assert ring[w["slot"][s]][c + j * C] == (ch, s), (it, s, c, j)
                    chunks[c].append(ch)
            for p in range(P):
                ring[w["slot"][s + 1]][p] = (w["prod"][s + 1][p], s + 1)
            barriers["producer"] += 1
            barriers["consumer"] += 1
        assert barriers["producer"] == barriers["consumer"] == steps + 1
        # each consumer's chunks increase; together they are the item's range exactly once
        assert all(ch == sorted(ch) for ch in chunks)
        assert sorted(x for ch in chunks for x in ch) == list(range(w["c0"], w["c1"]))
        mult[(w["tile"], w["split"])] = chunks
    # every (tile, chunk) once; every tile's splits tile the K chunks in order
    for t in range(pl["tiles"]):
        got = sorted(x for sp in range(pl["splits"]) for ch in mult[(t, sp)] for x in ch)
        assert got == list(range(pl["nchunks"])), t
        assert [items[t * pl["splits"] + sp]["split"] for sp in range(pl["splits"])] == list(range(pl["splits"]))
    # tiles: every (n0, m0) of the output once
    origins = {(w["n0"], w["m0"]) for w in items}
    assert len(origins) == pl["tiles"]
    # arrivals in a random finishing order: one last block per tile, counters back to 0
    rng = random.Random(seed)
    order = list(range(pl["items"]))
    rng.shuffle(order)
    counter, last = [0] * pl["tiles"], {}
    for it in order:
        t = items[it]["tile"]
        before = counter[t]
        counter[t] += 1
        if before == pl["splits"] - 1:
            assert t not in last
            last[t] = list(range(pl["splits"]))  # the slots, summed in split order
            counter[t] = 0
    assert counter == [0] * pl["tiles"] and sorted(last) == list(range(pl["tiles"]))
    return mult


@pytest.mark.parametrize("m,n,k,force", [
    (1, 2304, 16384, 0), (1, 13312, 16384, 0), (32, 16384, 6656, 0),  # the blog's shapes
    (3, 37, 1040, 0), (17, 33, 272, 0), (33, 19, 1000, 0),            # odd N, K % 64 != 0
    (1, 5, 16, 0), (2, 17, 48, 0),                                    # K < 64: one chunk
    (5, 23, 208, 7), (1, 1, 16, 3),                                   # more splits than chunks
    (40, 9, 336, 2), (70, 3, 4096, 0)])                               # M > 32: m-slices
def test_schedule_covers_every_tile_and_chunk_once(plan_lib, m, n, k, force):
    pl = get_plan(plan_lib, m, n, k, force=force)
    assert pl["fits"] and pl["grid"] == min(pl["items"], MI300X_CUS)
    assert pl["nchunks"] == -(-k // 64) and pl["tiles"] == -(-n // (16 * pl["nw"])) * -(-m // 32)
    if force:
        assert pl["splits"] == force
    else:
        assert 1 <= pl["splits"] <= min(pl["nchunks"], 32)
        # the plan's workspace: one fp32 slot per item when split, and a counter per tile
        slot = pl["nw"] * pl["mt"] * 1024
        assert pl["workspace"] == (pl["items"] * slot + pl["tiles"] * 4 if pl["splits"] > 1 else 0)
    for seed in range(3):
        run_schedule(plan_lib, pl, seed)


def test_plan_choices(plan_lib):
    """The split fills the CUs where tiles alone would not (N = 2304: 144 tiles for 304
    CUs), never goes below one ring step per item, is clamped when forced, and two
    n-tiles per item only where there is a tile for every CU."""
    pl = get_plan(plan_lib, 1, 2304, 16384)
    assert pl["nw"] == 1 and pl["tiles"] == 144 and pl["splits"] >= 2
    assert pl["items"] <= MI300X_CUS * -(-pl["items"] // MI300X_CUS)
    assert get_plan(plan_lib, 1, 13312, 16384)["nw"] == 2
    assert get_plan(plan_lib, 1, 4096, 100)["splits"] == 1            # 2 chunks: no split
    assert get_plan(plan_lib, 1, 64, 1 << 20)["splits"] == 32         # capped
    assert get_plan(plan_lib, 1, 64, 640, splits=99)["splits"] == 10  # one chunk per split at most
    assert get_plan(plan_lib, 1, 64, 640, tpb=2)["nw"] == 2
    big = get_plan(plan_lib, 1 << 20, 1 << 24, 1 << 16)
    assert not big["fits"]  # refused by the launcher rather than overflowing


def emulate_rocm_gemm(lib, a, b, sa, sb, bias, out_dtype, splits=None, plan_lib=None):
    """skinny_gemm.hip's order: per work item, each consumer wave sums its chunks (64
    bytes, products of the decoded values in fp32) in order, the consumers' partials are
    added in consumer order, the items (K splits) of a tile in split order, then scale,
    bias and one rounding. The split comes from the real plan (MI300X's 304 CUs) unless
    given. The MFMA's order inside a chunk is the hardware's; here a chunk is one fp32
    matmul. Every tile follows the same order, so this runs on whole matrices."""
    M, K = a.shape
    N = b.shape[0]
    af, bf = gfx90a_decode(lib, a).float(), gfx90a_decode(lib, b).float()
    nchunks = (K + 63) // 64
    if splits is None:
        splits = get_plan(plan_lib, M, N, K)["splits"] if plan_lib else 1
    consumers, step = 4, 8
    total = torch.zeros(M, N)
    for sp in range(splits):
        c0, c1 = sp * nchunks // splits, (sp + 1) * nchunks // splits
        item = torch.zeros(M, N)
        for c in range(consumers):
            part = torch.zeros(M, N)
            for s in range(c0, c1, step):
                for ch in (s + c, s + c + consumers):
                    if ch < c1:
                        part += af[:, 64 * ch:64 * ch + 64] @ bf[:, 64 * ch:64 * ch + 64].T
            item += part
        total += item
    y = total * (sa * sb.reshape(1, -1))
    return (y if bias is None else y + bias.float()).to(out_dtype)


@pytest.mark.parametrize("m,n,k,splits", [(1, 37, 1040, None), (5, 64, 4096, None),
                                          (17, 33, 272, None), (32, 16, 64, None),
                                          (3, 24, 4096, 1), (3, 24, 4096, 5), (2, 40, 16384, 32)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_emulated_gemm_on_fnuz_operands(lib, plan_lib, m, n, k, splits, out_dtype):
    a, b = rand_fnuz((m, k)), rand_fnuz((n, k))
    sa = torch.rand(1) / 16 + 1 / 32
    sb = torch.rand(n) / 16 + 1 / 32
    bias = torch.randn(n).to(out_dtype)
    got = emulate_rocm_gemm(lib, a, b, sa, sb, bias, out_dtype, splits, plan_lib).double()
    ref = (a.double() @ b.double().T) * sa.double() * sb.double().reshape(1, -1) + bias.double()
    err = ((got - ref).norm(dim=1) / ref.norm(dim=1).clamp_min(1e-30)).max().item()
    assert err < ROW_TOL, err


def test_emulated_split_order_is_fixed(lib, plan_lib):
    """The same split gives the same bits every time (the order never depends on arrival);
    another split may round differently, within the tolerance."""
    a, b = rand_fnuz((4, 8192), std=40.0), rand_fnuz((48, 8192), std=40.0)
    sa, sb = torch.ones(1) / 64, torch.ones(48) / 64
    one = emulate_rocm_gemm(lib, a, b, sa, sb, None, torch.float16, 4)
    assert torch.equal(one.view(torch.int16), emulate_rocm_gemm(lib, a, b, sa, sb, None, torch.float16, 4).view(torch.int16))
    ref = (a.double() @ b.double().T) / 4096
    for splits in (1, 2, 3, 16):
        got = emulate_rocm_gemm(lib, a, b, sa, sb, None, torch.float16, splits).double()
        assert ((got - ref).norm(dim=1) / ref.norm(dim=1)).max().item() < ROW_TOL


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
