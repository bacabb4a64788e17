"""The benchmark scripts still run: each once with --cpu-smoke (tiny shapes, CPU build).

Timings from these runs mean nothing; the point is that a script the H200 session
relies on does not rot between sessions.
"""

import os
import subprocess
import sys

import pytest

from conftest import GPU, ROOT

SCRIPTS = ["bench_rms_norm.py", "bench_norm_fp8.py", "bench_swiglu.py", "bench_decode.py",
           "bench_layer_norm.py", "bench_q4k.py", "bench_skinny_gemm.py", "profile_latency.py",
           "bench_q4k_cpu.py", "read_floor.py", "bench_q4k_layer.py", "bench_q4k_decode.py",
           "bench_norm_cpu.py"]


@pytest.mark.skipif(GPU, reason="smoke runs use the CPU variant; the GPU session runs the real thing")
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_script_runs(script, tmp_path):
    env = {**os.environ, "OUT": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--cpu-smoke"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert list(tmp_path.glob("*.md")), "the script wrote no result table"
