"""benchmarks/async_rollout.py: the ratios against the synchronous run, and the training-time curve."""

from __future__ import annotations

import pytest

from benchmarks.async_rollout import by_training_time, over_seeds, with_ratios


def _run(mode: str, seed: int, latency: float, to_target: float | None, train: float | None, phase: float):
    return {
        "mode": mode,
        "seed": seed,
        "latency_s": latency,
        "seconds_to_target": to_target,
        "seconds_to_target_train": train,
        "phase_s": phase,
    }


def test_each_ratio_is_against_the_synchronous_run_of_the_same_seed_and_latency() -> None:
    results = [
        _run("sync", 0, 1.0, 60, 50, 480),
        _run("sync", 0, 0.3, 30, 25, 270),
        _run("sync", 1, 1.0, 80, 70, 640),
        _run("ahead2", 0, 1.0, 45, 30, 336),
        _run("ahead2", 0, 0.3, 33, 20, 243),
        _run("ahead2", 1, 1.0, 40, 35, 320),
    ]
    ratios = {(r["mode"], r["seed"], r["latency_s"]): r["ratio"] for r in with_ratios(results)}
    expected = {"to_target": 0.75, "to_target_train": 0.6, "phase": 0.7}
    assert ratios["ahead2", 0, 1.0] == pytest.approx(expected)
    assert ratios["ahead2", 0, 0.3] == pytest.approx({"to_target": 1.1, "to_target_train": 0.8, "phase": 0.9})
    assert ratios["ahead2", 1, 1.0] == pytest.approx({"to_target": 0.5, "to_target_train": 0.5, "phase": 0.5})
    assert ratios["sync", 1, 1.0] == {"to_target": 1.0, "to_target_train": 1.0, "phase": 1.0}

    summary = over_seeds(with_ratios(results))
    assert list(summary) == [(1.0, "ahead2"), (0.3, "ahead2")], "no row for sync, latencies from the slowest"
    assert summary[1.0, "ahead2"]["seeds"] == 2
    assert summary[1.0, "ahead2"]["to_target"] == pytest.approx({"mean": 0.625, "worst": 0.75})
    assert summary[0.3, "ahead2"]["phase"] == pytest.approx({"mean": 0.9, "worst": 0.9})


def test_a_seed_that_never_reaches_the_target_has_no_ratio_and_leaves_the_mode_without_a_worst() -> None:
    results = [
        _run("sync", 0, 1.0, 60, 50, 480),
        _run("sync", 1, 1.0, None, None, 640),  # the synchronous run never got there: nothing to divide by
        _run("ahead4", 0, 1.0, None, None, 300),
        _run("ahead4", 1, 1.0, 40, 35, 320),
    ]
    rows = with_ratios(results)
    assert [r["ratio"]["to_target"] for r in rows if r["mode"] == "ahead4"] == [None, None]
    summary = over_seeds(rows)[1.0, "ahead4"]
    assert summary["to_target"] == {"mean": None, "worst": None}
    assert summary["phase"] == pytest.approx({"mean": (300 / 480 + 320 / 640) / 2, "worst": 0.625})


def test_training_time_sums_the_steps_up_to_each_validation_and_leaves_the_validations_out() -> None:
    rows = [
        {"step": 0, "val/all/em": 0.1},  # before training: at 0 s
        {"step": 1, "timing_s/step": 5.0, "training/elapsed_s": 14.0},
        {"step": 2, "timing_s/step": 6.0, "val/all/em": 0.4, "training/elapsed_s": 28.0},
        {"step": 3, "timing_s/step": 4.0, "training/elapsed_s": 32.0},
        {"step": 4, "timing_s/step": 5.0, "val/all/em": 0.6, "training/elapsed_s": 45.0},
    ]
    figures = by_training_time(rows, target=0.55)
    assert figures["curve_train"] == [(0.0, 0.1), pytest.approx((11.0, 0.4)), pytest.approx((20.0, 0.6))]
    assert figures["seconds_to_target_train"] == pytest.approx(20.0)
    assert figures["outside_steps_s"] == pytest.approx(45.0 - 20.0), "the validations' time, mostly"
    assert by_training_time(rows, target=0.9)["seconds_to_target_train"] is None
