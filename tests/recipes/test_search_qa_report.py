"""The published results are what the committed archive renders (no Ray, no model)."""

from __future__ import annotations

from pathlib import Path

from agentrl.recipes.curves import minutes_series
from agentrl.recipes.search_qa_report import (
    BEGIN,
    END,
    _rolling_mean,
    plot_by_time,
    plot_curves,
    render_results,
)

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = ROOT / "docs" / "results" / "search_qa"


def test_the_results_block_in_the_docs_is_what_the_committed_archive_renders():
    doc = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    published = BEGIN + doc.split(BEGIN, 1)[1].split(END, 1)[0] + END
    assert render_results(ARCHIVE) == published


def test_the_curves_are_drawn_from_the_archive(tmp_path):
    assert plot_curves(ARCHIVE, tmp_path / "curves.png").stat().st_size > 10_000


def test_the_rolling_mean_averages_the_last_window_values_and_fewer_at_the_start():
    assert _rolling_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert _rolling_mean([2.0], 4) == [2.0]


def test_validation_is_placed_at_the_training_minutes_spent_before_it():
    steps = [
        {"step": 0, "val/all/f1": 0.1},
        {"step": 1, "timing_s/step": 60.0},
        {"step": 2, "timing_s/step": 90.0, "val/all/f1": 0.2},
        {"step": 3, "timing_s/step": 30.0},
    ]
    assert minutes_series(steps, "val/all/f1") == ([0.0, 2.5], [0.1, 0.2])


def test_the_runs_validation_by_time_is_drawn_from_the_archive(tmp_path):
    path = plot_by_time(ARCHIVE, tmp_path / "by_time.png", runs=("rl_full", "rl_lora"))
    assert path is not None and path.stat().st_size > 10_000
