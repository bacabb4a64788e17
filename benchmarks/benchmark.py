"""RMSNorm benchmarks in the format of `kernels benchmark` (kernels 0.17.2).

How the CLI uses this file (kernels/cli/benchmark.py):
  * it runs every `<repo>/benchmarks/benchmark*.py` (so this file, not
    bench_rms_norm.py or harness.py), imported as module "benchmark_module"
    with the repo root as cwd, and keeps the `kernels.benchmark.Benchmark`
    subclasses defined here;
  * for each `benchmark_<w>` method it makes a fresh instance, sets
    `.kernel` (our loaded kernel module) and `.device` ("cuda", "cpu", ...),
    seeds torch with `seed`, and calls `setup_<w>` (or `setup`);
  * if `verify_<w>` exists: calls `benchmark_<w>()` ONCE, then `verify_<w>()`
    and requires `torch.allclose(self.out, reference, atol=1e-2)` (rtol is
    the default 1e-5, so atol does all the work; hence the small weights below);
  * then `warmup` + `iterations` calls of `benchmark_<w>`, each host-timed
    with perf_counter + device synchronize (so small shapes include launch
    overhead; bench_rms_norm.py is the precise, CUDA-graph-timed benchmark).
Module-level code must not need anything but torch and kernels: the CLI does
not put benchmarks/ on sys.path, so harness.py is imported only under __main__.

Running it against the local build (the CLI accepts a local directory: a
path that exists is loaded with `get_local_kernel(<dir>)`, which looks for
build variants in <dir> and <dir>/build; branch/version are then ignored):
    kernels benchmark .                            # from the repository root
    kernels benchmark . --iterations 200 --warmup 20 --output $OUT/kernels_benchmark.json
The CLI exits at once unless `tabulate` is installed (`pip install
'kernels[benchmark]'` or just `pip install tabulate`). A Hub id with
LOCAL_KERNELS does NOT work offline: for a non-local id the CLI first
snapshot-downloads the Hub repo to find its benchmarks/ folder.

Without the CLI (e.g. no tabulate), the same classes run through a
mini-runner that follows the CLI's sequence:
    python benchmarks/benchmark.py                 # our kernel from build/ (LOCAL_KERNELS)
    python benchmarks/benchmark.py --reference --device cpu   # torch stand-in kernel: checks this file
"""

import torch

from kernels.benchmark import Benchmark

EPS = 1e-6


def rms_norm_ref(x, weight, eps):
    # transformers LlamaRMSNorm: fp32 statistics, normalised value rounded to
    # the input dtype, then multiplied by the weight in that dtype.
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def small_weight(hidden, device, dtype):
    # |out| stays below ~1, where one bf16 ulp is <= 2**-8 < the runner's
    # fixed atol=1e-2; with weights ~1 a legitimate 1-ulp rounding difference
    # on outputs in [2, 4) (ulp 2**-6) would fail verification.
    return (0.05 + 0.15 * torch.rand(hidden, device=device)).to(dtype)


# name -> (rows, hidden): one decode token (Llama-8B hidden), a decode batch (70B
# hidden), a prefill chunk.
WORKLOADS = {"decode_1x4096": (1, 4096), "batch_128x8192": (128, 8192),
             "prefill_4096x4096": (4096, 4096)}


def with_workloads(cls):
    """Adds setup_/benchmark_/verify_<name> for every workload: the CLI finds
    workloads by these method names; each class supplies _make, _run and _ref."""
    for name, (rows, hidden) in WORKLOADS.items():
        setattr(cls, f"setup_{name}", lambda self, r=rows, h=hidden: self._make(r, h))
        setattr(cls, f"benchmark_{name}", lambda self: self._run())
        setattr(cls, f"verify_{name}", lambda self: self._ref())
    return cls


@with_workloads
class RMSNormBenchmark(Benchmark):
    seed = 0

    def _make(self, rows, hidden, dtype=torch.bfloat16):
        self.x = torch.randn(rows, hidden, device=self.device, dtype=dtype)
        self.weight = small_weight(hidden, self.device, dtype)
        self.out = torch.empty_like(self.x)

    def _run(self):
        self.kernel.rms_norm(self.x, self.weight, EPS, out=self.out)

    def _ref(self):
        return rms_norm_ref(self.x, self.weight, EPS)


@with_workloads
class FusedAddRMSNormBenchmark(Benchmark):
    """k.fused_add_rms_norm(x, residual, w, eps): residual <- x + residual; x <- rms_norm(residual).

    x and residual are the two halves of one buffer and `self.out` is that
    buffer, so the runner's single allclose checks both results; verify
    stacks the two references the same way. The op is in place, so the
    reference is computed from copies of the inputs taken in setup: this
    relies on the runner calling benchmark_<w> exactly once before verify_<w>
    (true for kernels 0.17.2). The timed calls keep updating the buffers;
    values stay finite and speed does not depend on them.
    """

    seed = 0

    def _make(self, rows, hidden, dtype=torch.bfloat16):
        self.out = torch.randn(2, rows, hidden, device=self.device, dtype=dtype)
        self.x, self.residual = self.out[0], self.out[1]  # both contiguous views
        self.x0, self.residual0 = self.x.clone(), self.residual.clone()
        self.weight = small_weight(hidden, self.device, dtype)

    def _run(self):
        self.kernel.fused_add_rms_norm(self.x, self.residual, self.weight, EPS)

    def _ref(self):
        s = self.x0 + self.residual0  # rounded to the dtype, as the kernel stores it
        return torch.stack([rms_norm_ref(s, self.weight, EPS), s])


# --- stand-alone mini-runner (not used by `kernels benchmark`) ---------------

class _ReferenceKernel:
    """Torch implementation of the package API, for checking this file without a build."""

    @staticmethod
    def rms_norm(x, weight, eps, out=None):
        y = rms_norm_ref(x, weight, eps)
        return out.copy_(y) if out is not None else y

    @staticmethod
    def fused_add_rms_norm(x, residual, weight, eps):
        residual.add_(x)
        x.copy_(rms_norm_ref(residual, weight, eps))


def _main():
    import argparse
    import statistics
    import sys
    import time
    from pathlib import Path

    p = argparse.ArgumentParser(description="Run the Benchmark classes of this file like `kernels benchmark` does.")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--reference", action="store_true", help="use a torch stand-in instead of our kernel")
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()

    if args.reference:
        kernel = _ReferenceKernel()
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import harness

        kernel = harness.load_kernel()

    def sync():
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    failed = False
    print(f"{'workload':45s} {'ok':>3s} {'mean ms':>9s} {'min ms':>9s}")
    for cls in (RMSNormBenchmark, FusedAddRMSNormBenchmark):
        for name in sorted(n for n in dir(cls) if n.startswith("benchmark_")):
            w = name[len("benchmark_"):]
            b = cls()
            b.kernel, b.device = kernel, args.device
            if b.seed is not None:
                torch.manual_seed(b.seed)
            getattr(b, f"setup_{w}", b.setup)()
            run = getattr(b, name)
            verify = getattr(b, f"verify_{w}", None)
            ok = "-"
            if verify is not None:
                run()
                sync()
                ok = "yes" if torch.allclose(b.out, verify(), atol=1e-2) else "NO"
                failed |= ok == "NO"
            for _ in range(args.warmup):
                run()
            sync()
            times = []
            for _ in range(args.iterations):
                t0 = time.perf_counter()
                run()
                sync()
                times.append((time.perf_counter() - t0) * 1e3)
            print(f"{cls.__name__ + '.' + w:45s} {ok:>3s} {statistics.mean(times):9.4f} {min(times):9.4f}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(_main())
