"""Tensor parallelism on the CPU: scripts/tp_decode.py under torchrun, gloo, 2 processes.

transformers shards a small Llama (its `base_model_tp_plan`), the script kernelizes it
with our RMSNorm and LlamaMLP layers and compares its logits with the un-sharded,
un-kernelized model on rank 0. The intermediate size splits 176 / 175 over the ranks,
so one rank runs silu_mul's whole vectors and the other its tail. The GPU run is
`scripts/h200_session.sh tp`.
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from conftest import GPU, REPO_ID, ROOT

SCRIPT = ROOT / "scripts" / "tp_decode.py"
TIMEOUT_S = 120  # one run takes ~6 s on a 2-core VM; a hung collective should not hang CI


def _cpu_build_missing():
    import kernels

    try:
        kernels.get_kernel(REPO_ID, version=1)
    except FileNotFoundError as e:
        return f"no CPU build ({str(e).splitlines()[0]}); run `make build`"
    return None


pytestmark = [
    pytest.mark.skipif(GPU, reason="runs the CPU variant; the GPU run is `scripts/h200_session.sh tp`"),
    pytest.mark.skipif(not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
                       reason="torch.distributed with gloo is not available"),
]


@pytest.fixture(scope="module")
def cpu_build():
    why = _cpu_build_missing()
    if why:
        pytest.skip(why)


def torchrun(args, out, nproc=2):
    """Run the script under torchrun in its own process group (killed whole on timeout)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           str(SCRIPT), "--device", "cpu", "--small", "--out", str(out), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
    try:
        stdout, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, _ = proc.communicate()
        pytest.fail(f"timed out after {TIMEOUT_S} s:\n{stdout[-4000:]}")
    return proc.returncode, stdout


def check_report(out, rc, stdout, dtype, nproc=2):
    assert rc == 0, stdout[-4000:]
    assert "logits check: PASS" in stdout, stdout[-4000:]
    report = json.loads((out / f"tp_decode_tp{nproc}.json").read_text())
    assert report["check_passed"] and report["world_size"] == nproc and report["dtype"] == dtype
    assert report["intermediate_per_rank"] == [176, 175]  # whole vectors on rank 0, a tail on rank 1
    # Two forwards (no_grad, grad-enabled), 2 layers: 2 * (2 * 2 + 1) norms, 2 * 2 MLPs, on every rank.
    assert report["op_calls_per_rank"] == [{"rms_norm": 10, "silu_mul": 4}] * nproc
    errs = report["errors"]
    assert set(errs) == {f"tp_{v}_{m}_vs_reference" for v in ("hf", "ours") for m in ("no_grad", "grad_enabled")} \
        | {"tp_ours_vs_tp_hf_no_grad"}
    assert all(e <= report["tolerance"] for e in errs.values()), errs
    return report


def test_tp2_gloo_fp32_with_timing(cpu_build, tmp_path):
    """transformers' sharding steps run on an in-memory model (no accelerate needed), then
    the check and a short decode timing (numbers meaningless on the CPU)."""
    rc, stdout = torchrun(["--shard", "apply", "--dtype", "float32"], tmp_path)
    report = check_report(tmp_path, rc, stdout, "float32")
    assert [r["batch"] for r in report["decode"]] == [1, 3]
    assert all(r["ours_ms_per_token"] > 0 and r["hf_ms_per_token"] > 0 for r in report["decode"])
    assert (tmp_path / "tp_decode_tp2.md").read_text().count("| 1 |") == 1


def test_tp2_gloo_bf16_check(cpu_build, tmp_path):
    """bf16, as on the GPUs: the tolerance that the H200 run uses."""
    rc, stdout = torchrun(["--shard", "apply", "--dtype", "bfloat16", "--check-only"], tmp_path)
    check_report(tmp_path, rc, stdout, "bfloat16")


@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None,
                    reason="from_pretrained(distributed_config=...) in transformers 5.22.2 raises without "
                           "accelerate: 'ValueError: Using a `device_map`, `tp_plan`, `torch.device` context "
                           "manager or setting `torch.set_default_device(device)` requires `accelerate`'")
def test_tp2_gloo_from_pretrained(cpu_build, tmp_path):
    """The user's path: a saved checkpoint loaded with from_pretrained(distributed_config=...)."""
    rc, stdout = torchrun(["--shard", "pretrained", "--check-only"], tmp_path)
    check_report(tmp_path, rc, stdout, "float32")


def test_without_torchrun_says_how_to_launch():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "torchrun --nproc-per-node" in proc.stderr, proc.stderr
