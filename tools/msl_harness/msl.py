"""Compile an MSL shader for the CPU harness and dispatch its kernels (used by the tests).

No Linux tool compiles Metal Shading Language, but MSL is C++ with attributes, address
spaces and a `kernel` keyword. `prepass` blanks exactly those (keeping every line and
column, so compiler errors and the runtime's messages point into the .metal file), the
`metal_stdlib` header here supplies the library subset, and runtime.cpp runs the
threadgroups as fibers. `build` makes one shared library per shader and compiler;
`Library.dispatch` calls a kernel through ctypes.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
INCLUDE = HERE / "include"
RUNTIME = HERE / "runtime.cpp"
ROOT = HERE.parent.parent
CACHE = ROOT / "build" / "_work" / "msl"

# Metal's built-in parameter attributes the runtime fills (msl_glue.h's ThreadIds).
BUILTINS = {
    "thread_position_in_grid", "thread_position_in_threadgroup",
    "threadgroup_position_in_grid", "threads_per_threadgroup", "threadgroups_per_grid",
    "threads_per_grid", "thread_index_in_threadgroup", "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup", "threads_per_simdgroup", "simdgroups_per_threadgroup",
}
SPACES = ("device", "constant", "threadgroup", "thread")
_LOCK = threading.Lock()
FLAGS = ["-std=c++20", "-O1", "-fPIC", "-pthread", "-Wall", "-Wno-unused-variable"]


class CompileError(RuntimeError):
    pass


class DispatchError(RuntimeError):
    pass


@dataclass
class Kernel:
    name: str
    # One (kind, index) per parameter: ("buffer", i) or (builtin name, 0).
    bindings: list[tuple[str, int]] = field(default_factory=list)
    call: str = ""  # what the glue calls: the name, or a template's `name<T>`

    def __post_init__(self):
        self.call = self.call or self.name


def _code_mask(src: str) -> list[bool]:
    """True where a character is code: not in a comment, string, char or # line."""
    mask = [True] * len(src)
    i, n = 0, len(src)
    line_start = True
    while i < n:
        c = src[i]
        if line_start and c == "#":  # preprocessor line, with continuations
            j = i
            while j < n and not (src[j] == "\n" and src[j - 1] != "\\"):
                j += 1
            mask[i:j] = [False] * (j - i)
            i = j
            continue
        if c == "\n":
            line_start = True
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            j += 1
        else:
            i += 1
            continue
        mask[i:j] = [False] * (j - i)
        i = j
    return mask


def _blank(chars: list[str], a: int, b: int) -> None:
    for k in range(a, b):
        if chars[k] != "\n":
            chars[k] = " "


def _split_params(text: str) -> list[tuple[int, int]]:
    """Spans of the top-level comma-separated parameters in `text` (inside the parens)."""
    spans, depth, start = [], 0, 0
    for k, c in enumerate(text):
        if c in "([<{":
            depth += 1
        elif c in ")]>}":
            depth -= 1
        elif c == "," and depth == 0:
            spans.append((start, k))
            start = k + 1
    if text[start:].strip():
        spans.append((start, len(text)))
    return spans


def prepass(src: str, path: str) -> tuple[str, list[Kernel]]:
    """MSL -> C++ of the same lines and columns, and the kernels with their bindings."""
    mask = _code_mask(src)
    chars = list(src)
    attrs: list[tuple[int, int, str]] = []  # [[...]] spans and their text
    i = 0
    while (i := src.find("[[", i)) >= 0:
        if not mask[i]:
            i += 2
            continue
        j = src.find("]]", i)
        if j < 0:
            raise CompileError(f"{path}: unterminated [[")
        attrs.append((i, j + 2, src[i + 2:j].strip()))
        _blank(chars, i, j + 2)
        i = j + 2

    kernels: list[Kernel] = []
    templates: dict[str, Kernel] = {}  # template kernels, by name, for their instances
    inserts: list[tuple[int, str]] = []  # (offset after a `;`, text), applied last
    for m in re.finditer(r"\b(kernel|device|constant|threadgroup|thread)\b", src):
        a, b = m.span()
        if not mask[a] or any(s <= a < e for s, e, _ in attrs):
            continue
        word = m.group(1)
        if word == "kernel":
            _kernel_decl(src, mask, a, b, attrs, path, templates, kernels)
        if word == "threadgroup" and _is_tg_storage(src, mask, a, b):
            chars[a:b] = list("MSL_TGLOCAL")  # same width as `threadgroup`
            # Poisoned per threadgroup (metal_stdlib); after the `;`, so only what
            # follows on that line (a comment, as a rule) moves right.
            semi = src.find(";", b)
            name = re.search(r"(\w+)\s*(\[[^;]*)?$", src[b:semi]).group(1)
            inserts.append((semi + 1, f" MSL_TG_POISON({name});"))
        else:
            _blank(chars, a, b)
    for s, e, text in attrs:  # [[kernel]] void f(...) is the other spelling
        if text == "kernel":
            _kernel_decl(src, mask, s, e, attrs, path, templates, kernels)
    for at, text in sorted(inserts, reverse=True):
        chars[at:at] = list(text)
    return "".join(chars), kernels


def _prev_code_char(src: str, mask: list[bool], a: int) -> str:
    k = a - 1
    while k >= 0 and (src[k].isspace() or not mask[k]):
        k -= 1
    return src[k] if k >= 0 else ""


_INSTANCE = re.compile(r"\s*decltype\(\s*(\w+)\s*<([^;]*)>\s*\)\s*\w+\s*<[^;]*>\s*;")


def _kernel_decl(src, mask, a, b, attrs, path, templates, kernels) -> None:
    """The kernel whose `kernel` keyword (or [[kernel]]) spans [a, b): a plain kernel, a
    template kernel (kept for its instances), or an instance, ggml-metal's spelling:
    `template [[host_name("f_f32")]] kernel decltype(f<float>) f<float>;`."""
    if (inst := _INSTANCE.match(src, b)):
        line = src.count("\n", 0, a) + 1
        hosts = [re.fullmatch(r'host_name\("(\w+)"\)', t) for x, y, t in attrs if y <= a]
        if not hosts or not hosts[-1] or inst.group(1) not in templates:
            raise CompileError(f"{path}:{line}: an instance needs [[host_name(...)]] and "
                               "the template kernel defined above it")
        t = templates[inst.group(1)]
        kernels.append(Kernel(hosts[-1].group(1), t.bindings, f"{t.name}<{inst.group(2)}>"))
        return
    k = _kernel_at(src, b, attrs, path)
    if _prev_code_char(src, mask, a) == ">":  # template <...> kernel void f(...)
        templates[k.name] = k
    else:
        kernels.append(k)


def _is_tg_storage(src: str, mask: list[bool], a: int, b: int) -> bool:
    """A `threadgroup T name[...];` statement (storage), not a pointer, cast or parameter."""
    if _prev_code_char(src, mask, a) not in "{;}":
        return False
    end = min(x for x in (src.find(";", b), src.find("=", b)) if x >= 0)
    return "*" not in src[b:end] and "&" not in src[b:end]


def _kernel_at(src: str, pos: int, attrs, path: str) -> Kernel:
    m = re.compile(r"\s*void\s+(\w+)\s*\(").match(src, pos)
    if not m:
        line = src.count("\n", 0, pos) + 1
        raise CompileError(f"{path}:{line}: a kernel must be `kernel void name(...)`")
    open_ = m.end() - 1
    depth, k = 0, open_
    while True:
        depth += {"(": 1, ")": -1}.get(src[k], 0)
        if depth == 0:
            break
        k += 1
    kern = Kernel(m.group(1))
    body = src[open_ + 1:k]
    for s, e in _split_params(body):
        a, b = open_ + 1 + s, open_ + 1 + e
        texts = [t for (x, y, t) in attrs if a <= x < b]
        line = src.count("\n", 0, a) + 1
        if len(texts) != 1:
            raise CompileError(f"{path}:{line}: kernel parameter without one [[...]] binding")
        t = texts[0]
        if (bm := re.fullmatch(r"buffer\((\d+)\)", t)):
            kern.bindings.append(("buffer", int(bm.group(1))))
        elif t in BUILTINS:
            kern.bindings.append((t, 0))
        else:
            raise CompileError(f"{path}:{line}: the harness does not support [[{t}]]")
    return kern


_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def headers(metal: Path, includes=()) -> dict[str, str]:
    """The quoted includes of `metal` (and theirs), found next to the including file or
    in `includes` (build.toml's `include` directories, which kernel-builder passes to
    Apple's compiler as -I), each pre-passed as the shader is: {include name: C++ text}.
    An include that is not found is left to the compiler (it may sit in a branch the
    shader never compiles, such as a header's host-only part)."""
    found: dict[str, str] = {}

    def visit(path: Path) -> None:
        for name in _QUOTED_INCLUDE.findall(path.read_text()):
            if name in found:
                continue
            src = next((d / name for d in (path.parent, *map(Path, includes))
                        if (d / name).is_file()), None)
            if src is None:
                continue
            src = src.resolve()
            text, _ = prepass(src.read_text(), str(src))
            found[name] = f'#line 1 "{src}"\n{text}'
            visit(src)

    visit(Path(metal).resolve())
    return found


# What Apple's compiler defines for -std=metal4.0 (kernel-builder's flag): shared
# headers test it to pick their MSL spelling (common/ggml_blocks.h, as ggml-common.h).
METAL_VERSION = 400


def translate(metal: Path) -> str:
    """The C++ translation unit for `metal`: the rewritten shader and its dispatch glue."""
    metal = Path(metal).resolve()
    text, kernels = prepass(metal.read_text(), str(metal))
    out = [f"#define __METAL_VERSION__ {METAL_VERSION}\n", f'#line 1 "{metal}"\n', text]
    if not text.endswith("\n"):
        out.append("\n")
    out.append('#line 1 "msl_glue (generated by msl.py)"\n#include <msl_glue.h>\n')
    for n, k in enumerate(kernels):
        args = []
        for j, (kind, idx) in enumerate(k.bindings):
            t = f"msl_rt::param_t<decltype(&{k.call}), {j}>"
            args.append(f"msl_rt::buffer<{t}>(b, {idx})" if kind == "buffer"
                        else f"msl_rt::builtin<{t}>(t.{kind})")
        out.append(f"static void msl_invoke_{n}(const msl_rt::ThreadIds& t, void* const* b) {{\n"
                   f"  {k.call}({', '.join(args)});\n}}\n")
    entries = ", ".join(
        f'{{"{k.name}", msl_invoke_{n}, '
        f'{1 + max([i for kind, i in k.bindings if kind == "buffer"], default=-1)}}}'
        for n, k in enumerate(kernels))
    out.append(f'extern "C" const msl_rt::Kernel msl_kernels[] = {{{entries}}};\n'
               f'extern "C" const int msl_num_kernels = {len(kernels)};\n')
    return "".join(out)


def compilers() -> dict[str, str]:
    """The C++ compilers the harness is tested with that exist here."""
    found = {}
    for name in ("g++", "clang++-19"):
        if shutil.which(name):
            found[name] = name
    return found


def _digest(*parts: str) -> str:
    texts = [*parts, " ".join(FLAGS), RUNTIME.read_text()]
    texts += [p.read_text() for p in sorted(INCLUDE.iterdir())]
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16]


def _compile(cmd: list[str], out: Path, stale: str) -> None:
    """Runs `cmd` writing to a temporary name, then moves it to `out` and removes the
    older builds matching `stale` (one cached build per shader and compiler)."""
    # Unique per process and thread: the tests build in parallel threads.
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    r = subprocess.run([*cmd, "-o", str(tmp)], capture_output=True, text=True)
    if r.returncode:
        tmp.unlink(missing_ok=True)
        raise CompileError(f"{' '.join(cmd)}\n{r.stderr}")
    os.replace(tmp, out)
    for old in out.parent.glob(stale):
        if old != out and old.with_suffix(out.suffix) != out:
            old.unlink(missing_ok=True)


def _runtime(cxx: str) -> Path:
    out_dir = CACHE / cxx
    rt = out_dir / f"runtime-{_digest(cxx)}.o"
    with _LOCK:  # one compile of the runtime per compiler, whatever the threads
        if not rt.exists():
            out_dir.mkdir(parents=True, exist_ok=True)
            _compile([cxx, *FLAGS, "-I", str(INCLUDE), "-c", str(RUNTIME)], rt, "runtime-*.o")
    return rt


def build(metal: Path, cxx: str = "g++", out_dir: Path | None = None, includes=()) -> Path:
    """Shared library of `metal` built with `cxx`, cached by content in `out_dir`
    (default build/_work/msl/<cxx>/). `includes`: directories for quoted includes."""
    tu = translate(metal)
    hdrs = headers(metal, includes)
    out_dir = Path(out_dir) if out_dir else CACHE / cxx
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{Path(metal).stem}-{cxx}"
    digest = _digest(cxx, tu, *[f"{k}\0{v}" for k, v in sorted(hdrs.items())])
    so = out_dir / f"{stem}-{digest}.so"
    if so.exists():
        return so
    rt = _runtime(cxx)
    # The pre-passed headers, staged where the compiler looks first.
    inc = out_dir / f"inc-{stem}-{digest}"
    for name, text in hdrs.items():
        (inc / name).parent.mkdir(parents=True, exist_ok=True)
        (inc / name).write_text(text)
    cpp = so.with_suffix(".cpp")
    cpp.write_text(tu)
    _compile([cxx, *FLAGS, "-I", str(inc), "-I", str(INCLUDE), "-shared", str(cpp), str(rt)],
             so, f"{stem}-*")
    for old in out_dir.glob(f"inc-{stem}-*"):
        if old != inc:
            shutil.rmtree(old, ignore_errors=True)
    return so


def _address(b) -> int:
    if isinstance(b, np.ndarray):
        assert b.flags.c_contiguous, "buffers must be C-contiguous"
        return b.ctypes.data
    assert b.device.type == "cpu" and b.is_contiguous(), "buffers: contiguous CPU tensors"
    return b.data_ptr()


class Library:
    """A built shader: `dispatch` runs one of its kernels over numpy buffers."""

    def __init__(self, metal: Path, cxx: str = "g++", out_dir: Path | None = None, includes=()):
        self.path = build(metal, cxx, out_dir, includes)
        self.lib = ctypes.CDLL(str(self.path))
        f = self.lib.msl_dispatch
        f.restype = ctypes.c_int
        u3 = ctypes.c_uint * 3
        f.argtypes = [ctypes.c_char_p, u3, u3, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                      ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_char_p, ctypes.c_int]
        self._u3 = u3

    def dispatch(self, kernel: str, counts, threadgroup, *buffers,
                 threads: bool = False, order: int = 0, seed: int = 0) -> None:
        """Runs `kernel` on `counts` threadgroups of `threadgroup` threads (Metal's
        dispatchThreadgroups), or on `counts` threads with `threads=True`
        (dispatchThreads). Buffers, bound as buffer(i), are C-contiguous numpy arrays or
        CPU torch tensors (for bfloat16, which numpy lacks).
        order: 0 threads in index order, 1 reversed, 2 shuffled by seed."""
        ptrs = (ctypes.c_void_p * max(1, len(buffers)))(*[_address(b) for b in buffers])
        err = ctypes.create_string_buffer(4096)
        pad = lambda v: self._u3(*(list(v) + [1, 1, 1])[:3])  # noqa: E731
        rc = self.lib.msl_dispatch(kernel.encode(), pad(counts), pad(threadgroup), int(threads),
                                   ptrs, len(buffers), order, seed, err, len(err))
        if rc:
            raise DispatchError(err.value.decode())
