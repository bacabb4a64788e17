"""The CPU instruction sets the CPU kernels are built for (cpu_kernels/cpu_isa.h), and
child test runs with IK_CPU_ISA set: the choice is read once a process, so each set runs
in its own."""

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

ISAS = ["baseline", "avx2", "avx512"]


def run_child(args, isa):
    return subprocess.run([sys.executable, *args], env={**os.environ, "IK_CPU_ISA": isa}, cwd=ROOT,
                          capture_output=True, text=True, timeout=900)


def supported(ik):
    """The sets this CPU runs, lowest first."""
    best = ik.ops.cpu_isa()
    return ISAS[:ISAS.index(best) + 1]


def skip_unless_parent(device):
    if device != "cpu" or os.environ.get("IK_CPU_ISA"):
        pytest.skip("the CPU's instruction sets, from the parent run")


def rerun_under(ik, isa, test_file, select, min_passed):
    """Runs `pytest test_file -k select` under `isa` and checks that at least min_passed
    passed (the parent run covers the CPU's best set)."""
    if isa not in supported(ik):
        pytest.skip(f"this CPU supports up to {ik.ops.cpu_isa()}")
    if isa == ik.ops.cpu_isa():
        pytest.skip(f"{isa}: the parent run's own")
    proc = run_child(["-m", "pytest", str(ROOT / "tests" / test_file), "-q", "-p", "no:cacheprovider",
                      "-k", select], isa)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed and int(passed.group(1)) >= min_passed, proc.stdout[-2000:]
