"""benchmarks/gpu_check.py: its CPU mode passes with only what a GPU machine has, so it is ready for one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.gpu_check import Check, run_check, verdict
from benchmarks.gpu_wheels import IMAGE_LACKS, WHEELS

REPO = Path(__file__).resolve().parents[2]
CHECKS = [
    "model/build",
    "dp/setup",
    "update/dp-bf16",
    "engine-vs-trainer/dp",
    "logprob-memory",
    "packing",
    "fsdp/setup",
    "update/fsdp-gloo",
    "weight-stream",
    "sleep-wake",
    "engine-vs-trainer/fsdp",
]


def test_the_cpu_mode_passes_every_check_with_none_of_the_packages_the_gpu_image_lacks(tmp_path):
    # Each package the GPU image lacks is made unimportable: an import of one on the check's path
    # fails here as it would there (the carried wheels, WHEELS, stay importable).
    shadow = tmp_path / "shadow"
    for name in IMAGE_LACKS:
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(f"raise ImportError('{name} is not on the GPU image')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow), str(REPO)])}
    out = tmp_path / "out"
    command = [sys.executable, "-m", "benchmarks.gpu_check", "--device", "cpu", "--out", str(out)]
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    record = json.loads((out / "gpu_check_cpu.json").read_text())
    assert [c["name"] for c in record["checks"]] == CHECKS
    assert {c["name"]: c["status"] for c in record["checks"]} == dict.fromkeys(CHECKS, "PASS")
    update = next(c for c in record["checks"] if c["name"] == "update/fsdp-gloo")["figures"]
    assert update["loss_last"] < update["loss_first"] and update["weight_dtypes"] == ["torch.float32"]
    table = (out / "gpu_check_cpu.md").read_text()
    assert "| engine-vs-trainer/fsdp | PASS | mean \\|Δ\\|" in table  # pipes in a cell are escaped


def test_a_check_that_raises_is_an_error_with_its_cause_and_the_next_check_still_runs():
    checks: list[Check] = []

    def broken(check: Check) -> None:
        raise RuntimeError("No backend type associated with device type cpu")

    run_check(checks, "first", broken)
    run_check(checks, "second", lambda c: verdict(c, True, "runs"))
    assert [(c.name, c.status) for c in checks] == [("first", "ERROR"), ("second", "PASS")]
    assert "RuntimeError: No backend type" in checks[0].detail


def test_every_carried_wheel_is_pinned_and_none_is_also_declared_missing():
    assert all("==" in spec for spec in WHEELS)
    carried = {spec.split("==")[0].lower() for spec in WHEELS}
    assert not carried & {name.lower() for name in IMAGE_LACKS}
