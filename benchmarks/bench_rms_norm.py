"""RMSNorm / fused add+RMSNorm: our kernel vs the usual anchors, side by side.

One process, same inputs for every implementation:
  ours     k.rms_norm / k.fused_add_rms_norm, loaded through kernels.get_kernel
           from <repo>/build (LOCAL_KERNELS, see harness.load_kernel)
  eager    the transformers LlamaRMSNorm formula as a plain torch function
  compile  torch.compile of that same function (default mode, dynamic=False)
  compile_ip  (fused, CUDA only) torch.compile of the function writing into x and
           residual in place, as ours does: the same buffers written, so the same write-backs
  compile_out  (fused, CUDA only) torch.compile of the out-of-place function writing its
           two outputs into buffers that rotate with the inputs: fresh outputs as
           `compile` writes, at as many addresses as ours writes
  liger    liger_kernel's Triton RMSNorm (LigerRMSNormFunction /
           LigerFusedAddRMSNormFunction), if liger_kernel is importable

Before timing, every implementation's output is compared with an fp64
reference on the same inputs. Timing: harness.time_us (CUDA-graph replay,
rotating input copies so inputs come from HBM, not L2). "floor" is the time a
copy kernel would need to move the op's compulsory bytes (inputs read once,
outputs written once) at the measured device copy bandwidth; "%floor" is
floor / ours, i.e. how close we get to copy speed.

Usage (GPU machine, from the repo root):
  python benchmarks/bench_rms_norm.py            # full sweep
  python benchmarks/bench_rms_norm.py --quick    # a few points
  python benchmarks/bench_rms_norm.py --cpu-smoke  # CPU, tiny shapes: checks the script itself
Results: $OUT/bench_rms_norm.{md,json} if OUT is set, else benchmarks/out/
(--name changes the base name, e.g. to split the sweep over several runs:
 --hidden 16384 --name rms_16384).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# Max-abs error relative to max |ref|: a couple of output roundings in the dtype.
TOL = {torch.bfloat16: 2e-2, torch.float16: 5e-3, torch.float32: 1e-4}
ROWS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
FUSED_ROWS = [1, 4, 16, 64, 256, 1024, 4096]
HIDDEN = [4096, 8192, 16384]


# --- the anchors -----------------------------------------------------------

def rms_norm_eager(x, weight, eps: float):
    # transformers LlamaRMSNorm.forward, with the module state passed in.
    dtype = x.dtype
    h = x.to(torch.float32)
    var = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(var + eps)
    return weight * h.to(dtype)


def fused_add_rms_norm_eager(x, residual, weight, eps: float):
    # What a decoder layer does without a fused kernel: residual = x + residual; y = norm(residual).
    s = x + residual
    return rms_norm_eager(s, weight, eps), s


def fused_add_rms_norm_in_place(x, residual, weight, eps: float):
    # The same, writing into x and residual as ours does (for torch.compile: the same
    # write pattern, rotated buffers written back, where the out-of-place function
    # writes fresh outputs that a CUDA graph's pool places at the same addresses).
    residual.add_(x)
    x.copy_(rms_norm_eager(residual, weight, eps))
    return x, residual


def fused_add_rms_norm_into(x, residual, weight, eps: float, y, s):
    s.copy_(x + residual)
    y.copy_(rms_norm_eager(s, weight, eps))
    return y, s


class RotatedOut:
    """f(x, r, w, eps, y, s) called as f(x, r, w, eps), with y and s the output buffers of
    the rotation copy that x is (rotate(xs) allots them), else fresh ones."""

    def __init__(self, f):
        self.f, self.outs = f, {}

    def rotate(self, xs):
        self.outs = {x.data_ptr(): (torch.empty_like(x), torch.empty_like(x)) for x in xs}

    def __call__(self, x, r, w, eps):
        y, s = self.outs.get(x.data_ptr()) or (torch.empty_like(x), torch.empty_like(x))
        return self.f(x, r, w, eps, y, s)


def ref64(x, weight, eps: float):
    h = x.double()
    return weight.double() * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps))


def rel_err(y, ref) -> float:
    return ((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def load_liger():
    """Return (rms_fn, fused_fn) from liger_kernel, or (None, None).

    Imported from the op modules directly (not liger_kernel.ops), which always
    gives liger's default Triton implementation regardless of LIGER_KERNEL_IMPL.
    Forward signatures in liger-kernel 0.8.5:
      LigerRMSNormFunction.forward(ctx, X, W, eps, offset=0.0, casting_mode="llama", in_place=True, row_mode=None)
      LigerFusedAddRMSNormFunction.forward(ctx, X, R, W, eps, offset=0.0, casting_mode="llama", in_place=False)
        -> (Y, S) with S = X + R and Y = rmsnorm(S), both new tensors.
    casting_mode="llama" is HF LlamaRMSNorm's rounding; in_place only affects backward.
    """
    try:
        import liger_kernel  # noqa: F401  (only to tell "not installed" from other failures)
    except ImportError as e:
        # a missing dependency of liger (e.g. triton) is not "not installed"
        print("liger: not installed" if e.name == "liger_kernel" else f"liger: import failed: {e}")
        return None, None
    rms = fused = None
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction as RMS

        rms = lambda x, w, eps: RMS.apply(x, w, eps, 0.0, "llama", False, None)  # noqa: E731
    except Exception as e:  # noqa: BLE001
        print(f"liger: rms_norm import failed: {type(e).__name__}: {e}")
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction as Fused

        fused = lambda x, r, w, eps: Fused.apply(x, r, w, eps, 0.0, "llama", False)  # noqa: E731
    except Exception as e:  # noqa: BLE001
        print(f"liger: fused_add_rms_norm import failed: {type(e).__name__}: {e}")
    return rms, fused


def allow_many_recompiles():
    # dynamic=False compiles one graph per shape; the default limit (8 per
    # function) would silently send later shapes back to eager.
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), 4096))


# --- one sweep ---------------------------------------------------------------

def check_all(impls, err, where):
    """Each implementation's error against the reference; None (and a line) if it fails,
    so one broken column does not stop the sweep."""
    errs = {}
    for name, f in impls.items():
        try:
            errs[name] = err(f)
        except Exception as e:  # noqa: BLE001
            errs[name] = None
            print(f"    {name}: failed on {where}: {type(e).__name__}: {e}")
    return errs


def sweep_rms(impls, hidden, rows_list, args, dev, dtype, bw, md, results):
    eps, tol = args.eps, TOL[dtype]
    names = list(impls)
    for d in hidden:
        table = []
        w = (1.0 + 0.1 * torch.randn(d, device=dev)).to(dtype)
        for n in rows_list:
            x = torch.randn(n, d, device=dev, dtype=dtype)
            ref = ref64(x, w, eps)
            errs = check_all(impls, lambda f: rel_err(f(x, w, eps), ref), f"{n}x{d}")
            print(f"  rms_norm {n}x{d} rel err: " + harness.err_summary(errs, tol))

            es = x.element_size()
            nbytes = n * d * es * 2 + d * es  # x read, out written, weight read
            n_rot = 1 if args.no_rotate else harness.rotations_for(n * d * es, args.rotate_mb << 20)
            xs = [x.clone() for _ in range(n_rot)]
            call = lambda f, i, xs=xs: f(xs[i], w, eps)  # noqa: E731
            table.append(harness.time_point("rms_norm", impls, errs, call, n, d, dtype, nbytes, n_rot,
                                    bw, dev, results))
            del xs
        headers = harness.table_headers(names)
        harness.print_table(headers, table, f"rms_norm, hidden={d}, {args.dtype}", md)


def sweep_fused(impls, hidden, rows_list, args, dev, dtype, bw, md, results):
    eps, tol = args.eps, TOL[dtype]
    names = list(impls)
    for d in hidden:
        table = []
        w = (1.0 + 0.1 * torch.randn(d, device=dev)).to(dtype)
        for n in rows_list:
            x = torch.randn(n, d, device=dev, dtype=dtype)
            r = torch.randn(n, d, device=dev, dtype=dtype)
            ref_s = x.double() + r.double()
            ref_y = ref64(ref_s, w, eps)
            def err(f):  # every impl gets its own clones: ours works in place
                y, s = f(x.clone(), r.clone(), w, eps)
                return max(rel_err(y, ref_y), rel_err(s, ref_s))

            errs = check_all(impls, err, f"{n}x{d}")
            print(f"  fused_add_rms_norm {n}x{d} rel err (max of out, residual): " + harness.err_summary(errs, tol))

            es = x.element_size()
            nbytes = n * d * es * 4 + d * es  # x, residual read; out, residual written; weight read
            n_rot = 1 if args.no_rotate else harness.rotations_for(2 * n * d * es, args.rotate_mb << 20)
            # Ours updates xs/rs in place on every call, so their values drift
            # during timing; the residual saturates (x + r == r in bf16 once r
            # is ~1000x larger), nothing overflows, and speed does not depend
            # on values. Correctness was checked above on fresh copies.
            xs = [x.clone() for _ in range(n_rot)]
            rs = [r.clone() for _ in range(n_rot)]
            rotated = [f for f in impls.values() if isinstance(f, RotatedOut)]
            for f in rotated:
                f.rotate(xs)
            call = lambda f, i, xs=xs, rs=rs: f(xs[i], rs[i], w, eps)  # noqa: E731
            table.append(harness.time_point("fused_add_rms_norm", impls, errs, call, n, d, dtype, nbytes,
                                    n_rot, bw, dev, results))
            for f in rotated:
                f.rotate([])
            del xs, rs
        headers = harness.table_headers(names)
        harness.print_table(headers, table, f"fused_add_rms_norm, hidden={d}, {args.dtype}", md)


# --- main ----------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, nargs="+", default=HIDDEN)
    p.add_argument("--rows", type=int, nargs="+", default=ROWS)
    p.add_argument("--fused-rows", type=int, nargs="+", default=FUSED_ROWS)
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    p.add_argument("--eps", type=float, default=1e-6)
    p.add_argument("--quick", action="store_true", help="a few points only (smoke run on the GPU)")
    p.add_argument("--no-fused", action="store_true", help="skip the fused add+RMSNorm table")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    p.add_argument("--no-liger", action="store_true", help="skip the liger column")
    p.add_argument("--compile-out", action="store_true",
                   help="add the compile_out column (fused, CUDA only; see the top of the file)")
    p.add_argument("--no-rotate", action="store_true", help="one input copy (L2-hot inputs)")
    p.add_argument("--rotate-mb", type=int, default=200, help="total size of rotated input copies")
    p.add_argument("--name", default="bench_rms_norm",
                   help="base name of the .md/.json results (to keep several runs apart)")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="run on CPU with tiny shapes to check the script (timings meaningless)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    dev = harness.bench_device(args.cpu_smoke, "bench_rms_norm")
    if dev is None:
        return 0
    if dev == "cpu":
        args.hidden, args.rows, args.fused_rows = [256], [1, 8], [1, 8]
    if args.quick:
        args.hidden = args.hidden[:1]
        args.rows = [n for n in (1, 128, 4096) if n in args.rows] or args.rows[:3]
        args.fused_rows = [n for n in (1, 4096) if n in args.fused_rows] or args.fused_rows[:2]
    dtype = DTYPES[args.dtype]
    torch.manual_seed(0)

    try:
        k = harness.load_kernel()
        stand_in = ""
    except Exception as e:  # noqa: BLE001
        if dev == "cuda":
            raise
        # CPU smoke test without a CPU build: exercise the script with the eager formula.
        print(f"ours: kernel not loadable on CPU ({type(e).__name__}: {e}); using the eager formula as a stand-in")
        k, stand_in = None, " (STAND-IN: eager formula)"

    if k is not None:
        def ours_fused(x, r, w, eps):
            k.fused_add_rms_norm(x, r, w, eps)  # in place: r <- x + r, x <- norm(r)
            return x, r
        rms_impls = {"ours": lambda x, w, eps: k.rms_norm(x, w, eps)}
        fused_impls = {"ours": ours_fused}
    else:
        rms_impls = {"ours": rms_norm_eager}
        fused_impls = {"ours": fused_add_rms_norm_eager}
    rms_impls["eager"] = rms_norm_eager
    fused_impls["eager"] = fused_add_rms_norm_eager
    if not args.no_compile:
        allow_many_recompiles()
        rms_impls["compile"] = torch.compile(rms_norm_eager, dynamic=False)
        fused_impls["compile"] = torch.compile(fused_add_rms_norm_eager, dynamic=False)
        if dev == "cuda":  # CPU Inductor (torch 2.13) fails on it from 2 rows: KeyError 'buf1'
            fused_impls["compile_ip"] = torch.compile(fused_add_rms_norm_in_place, dynamic=False)
            if args.compile_out:
                fused_impls["compile_out"] = RotatedOut(torch.compile(fused_add_rms_norm_into, dynamic=False))
    if not args.no_liger and dev == "cuda":
        liger_rms, liger_fused = load_liger()
        if liger_rms:
            rms_impls["liger"] = liger_rms
        if liger_fused:
            fused_impls["liger"] = liger_fused
    elif not args.no_liger:
        print("liger: skipped on CPU (Triton kernels)")
    if k is not None:
        rms_impls, fused_impls = harness.with_no_pdl(rms_impls, dev), harness.with_no_pdl(fused_impls, dev)

    bw = harness.copy_bandwidth(device=dev)
    gpu = torch.cuda.get_device_name() if dev == "cuda" else platform.processor() or "cpu"
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda}
    for dist in ("triton", "liger-kernel", "kernels"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    print(f"device: {gpu}; copy bandwidth (read+write): {bw / 1e9:.0f} GB/s; {versions}")

    out = harness.out_dir()
    md = out / f"{args.name}.md"
    md.write_text(
        f"# RMSNorm benchmark{stand_in}\n\n"
        f"- device: {gpu}; versions: {versions}\n"
        f"- dtype {args.dtype}, eps {args.eps}; measured copy bandwidth (read+write) {bw / 1e9:.0f} GB/s\n"
        f"- time = median per call, {'CUDA-graph replay' if dev == 'cuda' else 'CPU wall clock (smoke run)'}"
        f" over `copies` rotating input copies "
        f"(~{args.rotate_mb} MB total, at most 256 copies{'; rotation OFF' if args.no_rotate else ''}); "
        f"`*` = graph capture failed, plain event timing\n"
        f"- `X/ours` = X time / our time (>1: ours faster); floor = compulsory bytes / copy bandwidth; "
        f"`ours %floor` = floor / our time\n"
    )
    results = []
    with torch.no_grad():
        sweep_rms(rms_impls, args.hidden, args.rows, args, dev, dtype, bw, md, results)
        if not args.no_fused:
            sweep_fused(fused_impls, args.hidden, args.fused_rows, args, dev, dtype, bw, md, results)

    # Worst error seen per implementation, so a failing check is not lost in the scroll.
    worst = {}
    for r in results:
        for name, e in r["rel_err"].items():
            key, prev = f"{r['op']}:{name}", worst.get(f"{r['op']}:{name}", 0.0)
            worst[key] = "ERR" if e is None or prev == "ERR" else max(e, prev)
    tol = TOL[dtype]
    harness.print_table(
        ["impl", "max rel err", "ok"],
        [[k, v if v == "ERR" else f"{v:.2e}", "yes" if v != "ERR" and v <= tol else "NO"] for k, v in worst.items()],
        f"correctness vs fp64 (tolerance {tol:g})", md)

    meta = {"device": gpu, "versions": versions, "copy_bw_Bps": bw, "dtype": args.dtype, "eps": args.eps,
            "rotate_mb": args.rotate_mb, "no_rotate": args.no_rotate, "stand_in": bool(stand_in),
            "python": platform.python_version()}
    meta["argv"] = sys.argv[1:] if argv is None else list(argv)
    (out / f"{args.name}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"\nwrote {md} and {out / (args.name + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
