"""EXPERIMENT (IK_Q4K_XAHEAD): the Q4_K gemv's outputs saved, or two saved runs compared bit for bit.

    IK_Q4K_XAHEAD=0 python3 scripts/q4k_xahead_check.py save a.pt
    IK_Q4K_XAHEAD=1 python3 scripts/q4k_xahead_check.py save b.pt
    python3 scripts/q4k_xahead_check.py compare a.pt b.pt

The variable is read once a process, hence two processes. Same seed, so the same random
blocks and x in both; bf16 x (the only dtype the experiment takes), shapes where the
launcher splits K (the direct loop) and an odd N.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import harness  # noqa: E402

SHAPES = [(14336, 4096), (4096, 4096), (4096, 14336), (1000, 2560)]


def save(path):
    ik = harness.load_kernel()
    g = torch.Generator().manual_seed(7)
    outs = {}
    for n, k in SHAPES:
        nb = k // 256
        q = torch.randint(0, 256, (n, nb, 144), dtype=torch.uint8, generator=g)
        q[..., 0:2] = (torch.rand(n, nb, 1, generator=g) * 2e-3 + 1e-4).half().view(torch.uint8)
        q[..., 2:4] = (torch.rand(n, nb, 1, generator=g) * 2e-3).half().view(torch.uint8)
        q = q.reshape(n, nb * 144).cuda()
        for m in (1, 4, 8):
            x = torch.randn(m, k, generator=g).to(torch.bfloat16).cuda()
            out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            ik.ops.q4k_gemv(out, x, q)
            outs[f"{n}x{k} m={m}"] = out.cpu()
    torch.save(outs, path)


def compare(a, b):
    A, B = torch.load(a), torch.load(b)
    bad = [key for key in A if not torch.equal(A[key].view(torch.int16), B[key].view(torch.int16))]
    print(f"{len(A) - len(bad)} of {len(A)} cases bitwise equal" + (f"; differ: {bad}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(save(sys.argv[2]) if sys.argv[1] == "save" else compare(sys.argv[2], sys.argv[3]))
