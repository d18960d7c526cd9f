"""The recipes' phase runner (``agentrl.recipes.phases``): timed, printed, resumable, ``--only``."""

from __future__ import annotations

import io
import json

import pytest

from agentrl.recipes.phases import PhaseRunner, phase_time_table

PHASES = ("a", "b", "eval-x", "eval-y")


class Counter:
    """A phase function that counts its calls and returns a JSON mapping."""

    def __init__(self, value: int) -> None:
        self.value, self.calls = value, 0

    def __call__(self) -> dict:
        self.calls += 1
        return {"value": self.value}


def test_a_phase_runs_once_and_its_marker_makes_a_rerun_return_the_recorded_outputs(tmp_path):
    first = Counter(1)
    result = PhaseRunner(PHASES, markers=tmp_path / "phases", stream=io.StringIO()).run("a", "first", first)
    assert first.calls == 1 and result["value"] == 1 and result["seconds"] >= 0
    marker = tmp_path / "phases" / "a.json"
    assert json.loads(marker.read_text()) == result

    again, out = Counter(2), io.StringIO()
    rerun = PhaseRunner(PHASES, markers=tmp_path / "phases", stream=out).run("a", "first", again)
    assert again.calls == 0, "a phase with a marker is not run again"
    assert rerun == result and "done earlier" in out.getvalue()

    marker.unlink()  # deleting the marker redoes the phase
    assert PhaseRunner(PHASES, markers=tmp_path / "phases").run("a", "first", again)["value"] == 2


def test_only_runs_just_the_named_phases_and_a_group_names_its_members(tmp_path):
    runner = PhaseRunner(
        PHASES,
        markers=tmp_path,
        only=["b", "eval"],
        groups={"eval": ["eval-x", "eval-y"]},
        stream=io.StringIO(),
    )
    calls = {name: Counter(i) for i, name in enumerate(PHASES)}
    results = {name: runner.run(name, name, calls[name]) for name in PHASES}
    assert results["a"] is None and calls["a"].calls == 0 and not (tmp_path / "a.json").exists()
    assert all(calls[name].calls == 1 and results[name] is not None for name in PHASES[1:])


def test_a_phase_left_out_by_only_still_returns_what_it_recorded_earlier(tmp_path):
    PhaseRunner(PHASES, markers=tmp_path, stream=io.StringIO()).run("a", "a", Counter(7))
    later = PhaseRunner(PHASES, markers=tmp_path, only=["b"], stream=io.StringIO())
    assert later.run("a", "a", Counter(8))["value"] == 7


def test_an_empty_only_runs_every_phase(tmp_path):
    runner = PhaseRunner(PHASES, markers=tmp_path, only=[], stream=io.StringIO())
    assert runner.run("a", "a", Counter(1))["value"] == 1


def test_an_unknown_phase_name_fails_by_name(tmp_path):
    with pytest.raises(KeyError, match="'c'"):
        PhaseRunner(PHASES, only=["c"])
    with pytest.raises(KeyError, match="'c'"):
        PhaseRunner(PHASES, stream=io.StringIO()).run("c", "c", Counter(1))


def test_without_markers_every_phase_runs_timed_and_returns_what_it_returned(tmp_path):
    out = io.StringIO()
    runner = PhaseRunner(PHASES, stream=out)
    world = object()
    assert runner.run("a", "making a world", lambda x: (world, x), 3) == (world, 3)
    assert runner.run("b", "second", Counter(1)) == {"value": 1}, "nothing recorded, no seconds added"
    assert list(runner.seconds) == ["a", "b"] and all(s >= 0 for s in runner.seconds.values())
    assert runner.total >= sum(runner.seconds.values())
    assert "[1/4] a: making a world ..." in out.getvalue() and "[2/4] b: " in out.getvalue()
    assert not list(tmp_path.iterdir())


def test_a_failing_phase_is_timed_and_leaves_no_marker(tmp_path):
    def fail() -> dict:
        raise RuntimeError("boom")

    runner = PhaseRunner(PHASES, markers=tmp_path, stream=io.StringIO())
    with pytest.raises(RuntimeError, match="boom"):
        runner.run("a", "a", fail)
    assert "a" in runner.seconds and not (tmp_path / "a.json").exists()


def test_a_recorded_phase_must_return_a_mapping(tmp_path):
    with pytest.raises(TypeError, match="'a'"):
        PhaseRunner(PHASES, markers=tmp_path, stream=io.StringIO()).run("a", "a", lambda: [1])


def test_the_phase_time_table_lists_each_phase_then_the_total():
    table = phase_time_table({"world": 1.25, "ppo": 60.0}, 61.5, "**total** (so far)")
    assert table.splitlines() == [
        "| phase | wall time (s) |",
        "|---|---:|",
        "| world | 1.2 |",
        "| ppo | 60.0 |",
        "| **total** (so far) | **61.5** |",
    ]
