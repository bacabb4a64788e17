"""Static instruction mix of the skinny FP8 GEMM's main loop, from SASS (no GPU needed).

    cuobjdump -sass build/<variant>/*.abi3.so | python3 scripts/sass_mix.py [--all]
    cuobjdump -sass skinny_gemm.cubin | python3 scripts/sass_mix.py

For every skinny_gemm_kernel instantiation: the loop (backward branch) holding the most
HMMAs, its instructions per 64-byte K chunk of one warp (chunks per trip = HMMAs in the
loop / (m-tiles * n-tiles * 4)), grouped by the pipe they mostly occupy. Per chunk a warp
streams 32 weight rows x 64 bytes = 2 KB of weight, so (instructions per chunk) x (weight
bytes / 2 KB) is the kernel's total for that class.
"""

import re
import sys
from collections import Counter

FUNC = re.compile(r"Function : (\S+)")
INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
CLASSES = [  # (class, opcode prefixes); first match wins
    ("HMMA", ("HMMA",)), ("F2FP", ("F2FP",)), ("LDGSTS", ("LDGSTS",)),
    ("sync", ("LDGDEPBAR", "DEPBAR", "BAR", "WARPSYNC")), ("LDG", ("LDG",)), ("LDS", ("LDS", "LDSM")),
    ("STS", ("STS",)),
    ("int ALU", ("PRMT", "LOP3", "SHF", "IADD3", "IMAD", "LEA", "ISETP", "SEL", "IMNMX", "VIMNMX",
                 "MOV", "IABS", "ISCADD", "FLO", "POPC", "I2F", "F2I", "SGXT", "BMSK", "PLOP3", "P2R", "R2P",
                 "VIADD", "CS2R")),
    ("branch", ("BRA", "EXIT", "BSYNC", "BSSY", "CALL", "RET")),
]


def klass(op):
    for name, prefixes in CLASSES:
        if op.startswith(prefixes):
            return name
    return "other"


def functions(text):
    name, body = None, []
    for line in text.splitlines():
        m = FUNC.search(line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
            continue
        m = INSN.search(line)
        if m and name:
            body.append((int(m.group(1), 16), m.group(3), m.group(4)))
    if name:
        yield name, body


def demangle_args(name):
    # skinny_gemm_kernelI13__nv_bfloat16Li4ELi2ELi1EE...: the template's integers
    m = re.search(r"skinny_gemm_kernelI(\w+?)((?:Li\d+E)+)", name)
    if not m:
        return None
    out = "bf16" if "bfloat16" in m.group(1) else "f16"
    return out, [int(v) for v in re.findall(r"Li(\d+)E", m.group(2))]


def main_loop(body):
    best = None
    for addr, op, args in body:
        if op.startswith("BRA"):
            t = re.search(r"0x([0-9a-f]+)", args)
            if t and int(t.group(1), 16) < addr:
                lo = int(t.group(1), 16)
                ins = [o for a, o, _ in body if lo <= a <= addr]
                h = sum(o.startswith("HMMA") for o in ins)
                if best is None or h > best[0]:
                    best = (h, ins)
    return best


def main():
    text = sys.stdin.read()
    show_all = "--all" in sys.argv
    print(f"{'kernel [out, NT, CVT]':34} {'chunks/trip':>11}  per 64-byte chunk of a warp")
    for name, body in functions(text):
        info = demangle_args(name)
        if not info:
            continue
        out, targs = info
        nt = targs[0]
        loop = main_loop(body)
        if not loop or not loop[0]:
            continue
        h, ins = loop
        chunks = h / (2 * nt * 4)
        cnt = Counter(klass(o) for o in ins)
        per = {k: v / chunks for k, v in cnt.items()}
        total = sum(per.values())
        cols = "  ".join(f"{k}={per.get(k, 0):.1f}" for k, _ in CLASSES + [("other", ())] if per.get(k))
        print(f"{out} {targs!s:30} {chunks:11.0f}  total={total:.0f}  {cols}")
        if show_all:
            ops = Counter(o for o in ins)
            print("    " + "  ".join(f"{o}={v / chunks:.1f}" for o, v in ops.most_common()))


if __name__ == "__main__":
    main()
