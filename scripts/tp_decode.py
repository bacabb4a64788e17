"""Tensor-parallel decode with our kernelized RMSNorm and LlamaMLP layers (issue 9).

    torchrun --nproc-per-node N scripts/tp_decode.py --out DIR            # GPUs, NCCL, bf16
    python -m torch.distributed.run --nproc-per-node 2 scripts/tp_decode.py \\
        --device cpu --small --out DIR                                    # CPU, gloo, fp32

Rank 0 builds a randomly initialised LlamaForCausalLM (seed 0), keeps it as the
un-sharded, un-kernelized reference and saves it to a temporary folder; every rank
then loads it with transformers' own tensor parallelism,
`from_pretrained(dir, distributed_config=DistributedConfig(tp_size=N))`, which applies
the model's `base_model_tp_plan` (q/k/v/gate/up colwise, o/down rowwise with an
all-reduce, vocab-sharded embedding, gathered lm_head) through DTensors. That call
needs `accelerate` installed (transformers raises otherwise); `--shard apply` instead
builds the same seeded model on every rank, broadcasts rank 0's weights, and runs the
two steps from_pretrained runs before loading weights (`prepare_distribute_model`,
`maybe_distribute_model`), so the same sharding code runs without accelerate.

Then:
  check  rank 0 compares the TP model's logits (a prompt batch; no_grad and, for the
         DTensor code path transformers takes when autograd is on, grad-enabled) with
         the reference's, before and after kernelize with our RMSNorm and LlamaMLP
         layers (each rank loads the local build through `kernels`), and every rank
         counts the calls of our ops in the kernelized forward;
  time   prefill, then `--new` greedy decode steps with the KV cache (DynamicCache),
         per batch size, un-kernelized then kernelized; per-step time from CUDA events
         (wall clock on the CPU), median over the steps, on rank 0 (the all-reduces keep
         the ranks in step).
`--share-gpu` puts several ranks on one GPU (gloo; NCCL refuses it) to check the sharded
GPU kernels where only one GPU is lent; its timings mean nothing.
Rank 0 prints the table and writes tp_decode_tp<N>.md and .json under --out (or $OUT).
Exit status: 0 when the check passed, 1 when it failed, 2 for a usage or setup error.

Sizes: the MLP's intermediate size defaults to N*c - 1 with c a multiple of 16, so
every rank but the last holds c of the intermediate features (gate/up outputs, down
inputs: silu_mul's 16-byte vector path on the GPU, whole vectors on the CPU) and the
last rank c - 1 (the GPU's one-element path, the CPU's vector body and a tail); with
the default base 14336 that is 14335 for N = 2, 4 and 8. RMSNorm normalises the full,
replicated hidden size (4096 by default: the vector path).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPO_ID = "inference-kernels/inference-kernels"

# bf16 logits: the reference and the TP model round differently (bf16 partial sums
# all-reduced, another GEMM split); each rounding is ~2^-9 relative, and 8 layers of
# them on random weights leave several 1e-2: on 2 H200s transformers' own sharded model,
# un-kernelized, sat 5.5e-2 from the un-sharded one (2026-11-29), so the bound against
# the un-sharded model is 1e-1. Against the un-kernelized model with the same sharding,
# only our kernels' roundings differ (within an ulp of HF's ops): 1.4e-2 measured, bound
# 3e-2. fp32: reduction order alone, ~1e-6; 1e-4 leaves room (tests/test_kernelize.py).
TOLERANCE = {"float32": 1e-4, "bfloat16": 1e-1, "float16": 5e-2}
TOLERANCE_SAME_SHARDING = {"float32": 1e-4, "bfloat16": 3e-2, "float16": 1e-2}


class SetupError(RuntimeError):
    """A usage or environment problem: reported in one line, exit status 2."""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto",
                   help="auto: nccl on cuda, gloo on cpu")
    p.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto",
                   help="auto: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--shard", choices=["pretrained", "apply"], default="pretrained")
    p.add_argument("--share-gpu", action="store_true",
                   help="let several ranks share a GPU (rank i on GPU i %% count), through gloo: checks "
                        "the sharded GPU kernels on a one-GPU machine; its timings mean nothing")
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--intermediate", type=int, default=None,
                   help="default: N*c-1, c = ceil(--intermediate-base / N) rounded up to 16")
    p.add_argument("--intermediate-base", type=int, default=14336)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=64, help="timed decode steps per batch size")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--check-batch", type=int, default=2)
    p.add_argument("--check-only", action="store_true", help="skip the timing")
    p.add_argument("--small", action="store_true",
                   help="CI sizes: hidden 128, 2 layers, vocab 261, prompt 7, 3 steps, batch 1 3")
    p.add_argument("--out", default=None, help="results folder (default $OUT, else benchmarks/out)")
    if "--small" in (sys.argv[1:] if argv is None else argv):  # defaults only: explicit options win
        p.set_defaults(hidden=128, heads=4, kv_heads=2, head_dim=32, intermediate_base=344, layers=2,
                       vocab=261, batch=[1, 3], prompt=7, new=3, warmup=1)
    return p.parse_args(argv)


def odd_intermediate(base: int, n: int) -> int:
    c = -(-base // n)
    c = -(-c // 16) * 16
    return n * c - 1


def local_rows(total: int, n: int) -> list[int]:
    """Rows each rank holds of a dimension `total` split as torch.chunk splits it (DTensor's Shard)."""
    c = -(-total // n)
    return [max(0, min(c, total - r * c)) for r in range(n)]


def main(argv=None) -> int:
    args = parse_args(argv)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        if var not in os.environ:
            print(f"tp_decode: {var} is not set; launch with `torchrun --nproc-per-node N "
                  f"scripts/tp_decode.py` (or python -m torch.distributed.run)", file=sys.stderr)
            return 2
    if args.device == "cpu":
        # transformers builds its device mesh on torch's current accelerator: hide the
        # GPUs so that a CPU run on a GPU machine gets a CPU mesh.
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    # A program using NVLink multicast can take a shared host's GPUs down (the device
    # README); NCCL uses it by default where the hardware has it.
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    os.environ.setdefault("LOCAL_KERNELS", f"{REPO_ID}={ROOT / 'build'}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    rank = int(os.environ["RANK"])
    try:
        return run(args)
    except SetupError as e:
        print(f"tp_decode (rank {rank}): {e}", file=sys.stderr)
        return 2


def run(args) -> int:
    import torch
    import torch.distributed as dist

    rank, world, local_rank = (int(os.environ[v]) for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    device_type = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    backend = args.backend if args.backend != "auto" else (
        "nccl" if device_type == "cuda" and not args.share_gpu else "gloo")
    dtype_name = args.dtype if args.dtype != "auto" else ("bfloat16" if device_type == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)
    if device_type == "cuda":
        if not torch.cuda.is_available():
            raise SetupError("--device cuda but torch sees no GPU")
        count = torch.cuda.device_count()
        if args.share_gpu:
            if backend != "gloo":
                raise SetupError("--share-gpu needs the gloo backend (NCCL refuses two ranks on one GPU)")
            local_rank %= count
            os.environ["LOCAL_RANK"] = str(local_rank)  # transformers binds the GPU numbered LOCAL_RANK
        elif local_rank >= count:
            raise SetupError(f"local rank {local_rank} but only {count} GPUs are visible; use "
                             f"--nproc-per-node <= {count}, or --share-gpu for a correctness check")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if backend == "nccl" and device_type != "cuda":
        raise SetupError("the nccl backend needs --device cuda")
    for name, heads in (("--heads", args.heads), ("--kv-heads", args.kv_heads)):
        if heads % world:
            raise SetupError(f"{name} {heads} does not divide by {world} ranks: transformers' plan "
                             f"shards attention by whole heads")
    intermediate = args.intermediate or odd_intermediate(args.intermediate_base, world)

    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    try:
        return session(args, torch, dist, rank, world, device, dtype, dtype_name, backend, intermediate)
    finally:
        dist.destroy_process_group()


def session(args, torch, dist, rank, world, device, dtype, dtype_name, backend, intermediate) -> int:
    import logging

    import transformers
    import kernels
    from transformers import LlamaConfig, LlamaForCausalLM

    logging.getLogger("kernels").setLevel(logging.ERROR)  # unmapped layers are expected
    transformers.logging.set_verbosity_error()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import harness

    try:
        ik = kernels.get_kernel(REPO_ID, version=1)
    except FileNotFoundError as e:
        raise SetupError(f"no local build for this torch ({e}); run `python tools/build.py` first") from e

    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=intermediate,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
                         max_position_embeddings=args.prompt + args.new + args.warmup + 16,
                         rms_norm_eps=1e-5, tie_word_embeddings=False)
    say = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)
    shards = local_rows(intermediate, world)
    vec = 16 // dtype.itemsize
    say(f"tp_decode: {world} ranks, {backend}, {device.type}{' (shared)' if args.share_gpu else ''}, "
        f"{dtype_name}, shard={args.shard}; "
        f"torch {torch.__version__}, transformers {transformers.__version__}, kernels {kernels.__version__}")
    say(f"  hidden {args.hidden}, heads {args.heads}/{args.kv_heads}x{args.head_dim}, intermediate "
        f"{intermediate} -> per rank {shards} (whole 16-byte vectors: "
        f"{['yes' if s % vec == 0 else 'no' for s in shards]}), {args.layers} layers, vocab {args.vocab}")

    # --- the reference (rank 0) and the sharded model (every rank) ---
    ref = None
    if args.shard == "pretrained":
        import importlib.util

        if importlib.util.find_spec("accelerate") is None:
            raise SetupError("transformers 5.22's from_pretrained(distributed_config=...) requires `accelerate` "
                             "(ValueError: Using a `device_map`, `tp_plan`, ... requires `accelerate`); "
                             "install it or use --shard apply")
        folder = [None]
        if rank == 0:
            ref = build_model(torch, LlamaForCausalLM, config, device, dtype)
            folder[0] = tempfile.mkdtemp(prefix="tp_decode_")
            ref.save_pretrained(folder[0])
        dist.broadcast_object_list(folder, src=0)
        try:
            from transformers.distributed import DistributedConfig

            tp = LlamaForCausalLM.from_pretrained(folder[0], distributed_config=DistributedConfig(tp_size=world),
                                                  dtype=dtype).eval()
            if world == 1:  # no mesh, so from_pretrained left it on the CPU
                tp.to(device)
            dist.barrier()
        finally:
            if rank == 0:
                shutil.rmtree(folder[0], ignore_errors=True)
    else:
        import copy

        from transformers.distributed import DistributedConfig

        tp = build_model(torch, LlamaForCausalLM, config, device, dtype)
        with torch.no_grad():
            for p in tp.parameters():  # every rank must hold rank 0's weights before it takes its shard
                dist.broadcast(p.data, src=0)
        if rank == 0:
            ref = copy.deepcopy(tp)
        dcfg, _, mesh = LlamaForCausalLM.prepare_distribute_model(DistributedConfig(tp_size=world))
        tp = LlamaForCausalLM.maybe_distribute_model(tp, dcfg, mesh).eval()

    check_sharded(tp, world, intermediate, shards, rank)

    # --- the check ---
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.check_batch, args.prompt), generator=gen).to(device)
    results = {"hf": forwards(torch, tp, ids)}
    want_ref = None
    if rank == 0:
        want_ref = forwards(torch, ref, ids, grad=False)["no_grad"]
        del ref
        if device.type == "cuda":
            torch.cuda.empty_cache()

    timings = {}
    if not args.check_only:
        timings["hf"] = time_decode(torch, tp, args, device, lambda m: say(f"  un-kernelized {m}"))

    kernelize_ours(tp, device.type)
    ops = {"rms_norm": ik.ops.rms_norm.default, "silu_mul": ik.ops.silu_mul.default}
    results["ours"], counts = count_calls(torch, ops, lambda: forwards(torch, tp, ids))
    want = {"rms_norm": 2 * args.layers + 1, "silu_mul": args.layers}
    per_rank = [None] * world
    dist.all_gather_object(per_rank, counts)
    # forwards() runs two forwards (no_grad and grad-enabled)
    count_ok = all(c == {k: 2 * v for k, v in want.items()} for c in per_rank)

    if not args.check_only:
        timings["ours"] = time_decode(torch, tp, args, device, lambda m: say(f"  kernelized {m}"))

    ok = [True]
    report = None
    if rank == 0:
        tol = TOLERANCE[dtype_name]
        rows, errs = [], {}
        for name in ("hf", "ours"):
            for mode, logits in results[name].items():
                e = rel_err(logits, want_ref)
                errs[f"tp_{name}_{mode}_vs_reference"] = e
                rows.append([f"TP{world} {'kernelized' if name == 'ours' else 'un-kernelized'}, {mode}",
                             f"{e:.2e}", f"{tol:.0e}", "PASS" if e <= tol else "FAIL"])
        e = rel_err(results["ours"]["no_grad"], results["hf"]["no_grad"])
        errs["tp_ours_vs_tp_hf_no_grad"] = e
        tol_same = TOLERANCE_SAME_SHARDING[dtype_name]
        rows.append([f"TP{world} kernelized vs TP{world} un-kernelized, no_grad", f"{e:.2e}",
                     f"{tol_same:.0e}", "PASS" if e <= tol_same else "FAIL"])
        logits_ok = all(r[-1] == "PASS" for r in rows)
        harness.print_table(["logits (relative L2 error vs the un-sharded, un-kernelized model)", "error",
                             "tolerance", ""], rows)
        print(f"our op calls per rank (two forwards): {per_rank}; expected "
              f"{ {k: 2 * v for k, v in want.items()} }: {'PASS' if count_ok else 'FAIL'}")
        ok[0] = logits_ok and count_ok
        print(f"logits check: {'PASS' if ok[0] else 'FAIL'}", flush=True)
        report = {
            "world_size": world, "backend": backend, "device": device.type, "share_gpu": args.share_gpu,
            "dtype": dtype_name,
            "shard": args.shard, "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "kernels": kernels.__version__},
            "config": {"hidden": args.hidden, "heads": args.heads, "kv_heads": args.kv_heads,
                       "head_dim": args.head_dim, "intermediate": intermediate, "layers": args.layers,
                       "vocab": args.vocab, "prompt": args.prompt, "new": args.new},
            "intermediate_per_rank": shards, "tolerance": tol,
            "tolerance_same_sharding": tol_same, "errors": errs, "op_calls_per_rank": per_rank,
            "check_passed": ok[0], "decode": timings.get("ours") and decode_rows(timings),
        }
        write_results(args, harness, report, world)
    dist.broadcast_object_list(ok, src=0)
    return 0 if ok[0] else 1


def build_model(torch, cls, config, device, dtype):
    torch.manual_seed(0)
    with torch.device(device):
        model = cls(config)
    return model.to(dtype).eval()


def check_sharded(model, world, intermediate, shards, rank):
    """Fail loudly if transformers did not shard the MLP as its plan says."""
    from torch.distributed.tensor import DTensor

    mlp = model.model.layers[0].mlp
    got = {}
    for name, dim in (("gate_proj", 0), ("up_proj", 0), ("down_proj", 1)):
        w = getattr(mlp, name).weight
        if world > 1 and not isinstance(w, DTensor):
            raise SetupError(f"mlp.{name}.weight is a {type(w).__name__}, not a DTensor: the model was not sharded")
        local = w.to_local() if isinstance(w, DTensor) else w
        got[name] = local.shape[dim]
    if any(v != shards[rank] for v in got.values()):
        raise SetupError(f"rank {rank}: MLP shard sizes {got}, expected {shards[rank]} of {intermediate}")


def forwards(torch, model, ids, grad=True):
    """Logits in fp32: under no_grad (transformers' local-tensor path) and, if `grad`, with
    autograd on (the DTensor path for the sharded linears)."""
    out = {}
    with torch.no_grad():
        out["no_grad"] = model(ids).logits.float()
    if grad:
        with torch.enable_grad():
            out["grad_enabled"] = model(ids).logits.detach().float()
    return out


def count_calls(torch, ops, fn):
    from torch.utils._python_dispatch import TorchDispatchMode

    counts = dict.fromkeys(ops, 0)
    which = {op: name for name, op in ops.items()}

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func in which:
                counts[which[func]] += 1
            return func(*args, **(kwargs or {}))

    with Count():
        result = fn()
    return result, counts


def rel_err(x, ref) -> float:
    return ((x.double() - ref.double()).norm() / ref.double().norm()).item()


def kernelize_ours(model, device_type):
    from kernels import LocalLayerRepository, Mode, kernelize, replace_kernel_forward_from_hub, use_kernel_mapping
    from transformers.models.llama.modeling_llama import LlamaMLP

    replace_kernel_forward_from_hub(LlamaMLP, "LlamaMLP")  # transformers 5.22 does not mark it
    build = ROOT / "build"
    mapping = {name: {device_type: LocalLayerRepository(repo_path=build, layer_name=name)}
               for name in ("RMSNorm", "LlamaMLP")}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        return kernelize(model, mode=Mode.INFERENCE, device=device_type)


def time_decode(torch, model, args, device, say):
    """{batch: (median ms per step, wall ms per step, tokens)} for prefill + greedy steps."""
    out = {}
    for batch in args.batch:
        gen = torch.Generator().manual_seed(100 + batch)
        ids = torch.randint(0, args.vocab, (batch, args.prompt), generator=gen).to(device)
        decode(torch, model, ids, args.warmup, device)
        steps, wall, tokens = decode(torch, model, ids, args.new, device)
        out[batch] = (statistics.median(steps), wall / args.new, tokens)
        say(f"batch {batch}: median {out[batch][0]:.3f} ms/step over {args.new} steps")
    return out


def decode(torch, model, ids, new, device):
    """Prefill, then `new` greedy steps with the KV cache. Returns (per-step ms, wall ms, tokens)."""
    cuda = device.type == "cuda"
    with torch.no_grad():
        out = model(ids, use_cache=True)
        cache, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        tokens = [nxt]
        if cuda:
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(new)]
            torch.cuda.synchronize()
        steps = []
        t0 = time.perf_counter()
        for i in range(new):
            if cuda:
                events[i][0].record()
            else:
                s = time.perf_counter()
            out = model(nxt, past_key_values=cache, use_cache=True)
            cache, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
            tokens.append(nxt)
            if cuda:
                events[i][1].record()
            else:
                steps.append((time.perf_counter() - s) * 1e3)
        if cuda:
            torch.cuda.synchronize()
            steps = [a.elapsed_time(b) for a, b in events]
        wall = (time.perf_counter() - t0) * 1e3
    return steps, wall, torch.cat(tokens, 1).cpu()


def decode_rows(timings):
    rows = []
    for batch, (hf_ms, hf_wall, hf_tok) in timings["hf"].items():
        ours_ms, ours_wall, ours_tok = timings["ours"][batch]
        rows.append({"batch": batch, "hf_ms_per_token": hf_ms, "ours_ms_per_token": ours_ms,
                     "speedup": hf_ms / ours_ms, "hf_wall_ms_per_step": hf_wall,
                     "ours_wall_ms_per_step": ours_wall,
                     "greedy_tokens_equal": f"{int((hf_tok == ours_tok).sum())}/{hf_tok.numel()}"})
    return rows


def write_results(args, harness, report, world):
    out = Path(args.out) if args.out else harness.out_dir()
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"tp_decode_tp{world}{'_shared_gpu' if report['share_gpu'] else ''}"
    md = stem.with_suffix(".md")
    c = report["config"]
    md.write_text(f"# TP{world} decode: {report['device']} {report.get('gpu') or ''}, {report['backend']}, "
                  f"{report['dtype']}, hidden {c['hidden']}, intermediate {c['intermediate']} "
                  f"(per rank {report['intermediate_per_rank']}), {c['layers']} layers, prompt {c['prompt']}, "
                  f"{c['new']} steps; logits check {'PASS' if report['check_passed'] else 'FAIL'}\n\n"
                  + "".join(f"- {k}: {v:.2e} (tolerance "
                            f"{report['tolerance_same_sharding' if k.startswith('tp_ours_vs_tp_hf') else 'tolerance']:.0e})\n"
                            for k, v in report["errors"].items()))
    if report["decode"]:
        rows = [[r["batch"], f"{r['hf_ms_per_token']:.3f}", f"{r['ours_ms_per_token']:.3f}",
                 f"{r['speedup']:.3f}x", f"{r['hf_wall_ms_per_step']:.3f}", f"{r['ours_wall_ms_per_step']:.3f}",
                 r["greedy_tokens_equal"]] for r in report["decode"]]
        harness.print_table(["batch", "un-kernelized ms/token", "kernelized ms/token", "speed-up",
                             "un-kernelized wall ms/step", "kernelized wall ms/step", "greedy tokens equal"],
                            rows, f"TP{world} decode latency per token (median over steps)", md)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {md} and {stem.with_suffix('.json')}")


if __name__ == "__main__":
    raise SystemExit(main())
