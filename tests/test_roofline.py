"""benchmarks/roofline.py's parsing and plotting, on canned `ncu --csv` output (no GPU).

The fixtures in tests/data/ are in the format Nsight Compute's CLI prints with
`--csv --print-units base` (the default details page: one row per kernel and metric,
after the ==PROF== lines and whatever the profiled program printed). They are made
up to look like ncu's output; they were not recorded on a GPU.
"""

import shutil
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import roofline  # noqa: E402

DATA = ROOT / "tests" / "data"


def test_parse_details_page():
    ks = roofline.parse_ncu_csv((DATA / "ncu_layer_norm_ours.csv").read_text())
    assert [k.id for k in ks] == ["0", "1"]
    assert "layer_norm_kernel" in ks[0].name
    m = ks[0].metrics
    assert m["gpu__time_duration.sum"] == pytest.approx(19968e-9)  # nsecond -> s
    assert m["dram__bytes.sum"] == 67141632  # thousands separators stripped
    assert m["smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct"] == pytest.approx(61.2)


def test_summarize_per_call():
    ks = roofline.parse_ncu_csv((DATA / "ncu_layer_norm_ours.csv").read_text())
    r = roofline.summarize("layer_norm/ours", ks, calls=2)
    assert r.time_s == pytest.approx(20000e-9)
    assert r.dram_bytes == 67141632
    assert r.flops == 33554432 + 50331648 + 2 * 16777216
    assert r.sectors_per_request == pytest.approx(4.0)
    assert r.intensity == pytest.approx(r.flops / r.dram_bytes)
    assert r.long_scoreboard_pct == pytest.approx((61.2 * 19968 + 60.8 * 20032) / 40000)  # time-weighted
    assert r.kernels == [ks[0].name]


def test_parse_raw_page_and_scaled_units():
    text = "\n".join([
        "==PROF== Connected to process 1",
        '"ID","Kernel Name","gpu__time_duration.sum","dram__bytes.sum","smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"',
        '"","","usecond","Mbyte","inst"',
        '"0","k1","1.50","2.5","1,000"',
        '"1","k2","n/a","0.5","2000"',
    ])
    ks = roofline.parse_ncu_csv(text)
    assert [k.name for k in ks] == ["k1", "k2"]
    assert ks[0].metrics["gpu__time_duration.sum"] == pytest.approx(1.5e-6)
    assert ks[0].metrics["dram__bytes.sum"] == pytest.approx(2.5e6)
    assert ks[1].metrics["gpu__time_duration.sum"] is None
    r = roofline.summarize("x/ours", ks, calls=1)
    assert r.flops == 2 * 3000 and r.dram_bytes == pytest.approx(3e6)


def test_matmul_flops_replace_the_fp32_counts(tmp_path):
    """A matmul's FLOPs are its 2 M N K (tensor-core work is not in the FP32 counts), and
    its point brings the tensor ceiling into the plot; every profiled op is a workload op."""
    ks = roofline.parse_ncu_csv((DATA / "ncu_layer_norm_ours.csv").read_text())
    mm = roofline.summarize("skinny_gemm_fp8_m32/ours", ks, calls=2, matmul_flops=2 * 32 * 13312 * 16384)
    assert mm.flops == 2 * 32 * 13312 * 16384 and mm.flops_kind == "2mnk"
    assert roofline.summarize("layer_norm/ours", ks, calls=2).flops_kind == "fp32"
    png = roofline.plot_roofline([mm], 4.2e12, 67e12, tmp_path / "r.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import roofline_workload

    assert set(roofline_workload.MATMUL_FLOPS) <= set(roofline_workload.OPS)
    families = {op.split("/")[0] for op in roofline_workload.OPS}
    assert {"skinny_gemm_fp8_m1", "q4k_gemv", "q6k_gemv", "silu_mul", "rms_norm_fp8_dynamic"} <= families
    assert all(f"{f}/ours" in roofline_workload.OPS and f"{f}/torch" in roofline_workload.OPS for f in families)


def test_no_csv_is_empty():
    assert roofline.parse_ncu_csv("==ERROR== ERR_NVGPUCTRPERM - no permission\n") == []


def test_plot_and_report_from_saved_csv(tmp_path, monkeypatch):
    """The whole report path, as the H200 run would take it after ncu: table, json, PNG."""
    saved = tmp_path / "saved"
    saved.mkdir()
    shutil.copy(DATA / "ncu_layer_norm_ours.csv", saved / "layer_norm__ours.csv")
    shutil.copy(DATA / "ncu_layer_norm_naive.csv", saved / "layer_norm__naive.csv")
    out = tmp_path / "out"
    monkeypatch.setenv("OUT", str(out))
    rc = roofline.main(["--from-csv", str(saved), "--bw", "4200", "--reps", "2",
                        "--ops", "layer_norm/ours", "layer_norm/naive"])
    assert rc == 0
    png = out / "roofline.png"
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "roofline.md").read_text()
    assert "layer_norm/ours" in md and "layer_norm/naive" in md and "4200 GB/s" in md
    assert "naive_layer_norm_kernel" in md


def test_redraw_from_the_recorded_h200_json(tmp_path, monkeypatch):
    """The committed report (BENCHMARKS.md) is redrawn from the H200 run's roofline.json."""
    out = tmp_path / "out"
    monkeypatch.setenv("OUT", str(out))
    saved = ROOT / "benchmarks" / "results" / "2026-12-01-h200-roofline-s29c.json"
    assert roofline.main(["--from-json", str(saved), "--note", "test"]) == 0
    assert (out / "roofline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "roofline.md").read_text()
    assert "layer_norm/naive" in md and "layer_norm/ours" in md and "q4k_gemv/ours" in md
