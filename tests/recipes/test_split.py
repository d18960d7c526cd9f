"""The held-out split: evaluation questions never train, by id or by text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.eval.datasets import DatasetSpec, load_questions
from agentrl.recipes.split import SourceSpec, build_split, check_disjoint, default_heldout


def write(path: Path, rows: list[dict]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def qa(i: int, question: str, **extra) -> dict:
    return {"id": f"q{i}", "question": question, "golden_answers": [f"a{i}"], **extra}


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def files(tmp_path):
    nq = write(tmp_path / "nq.jsonl", [qa(i, f"who wrote book number {i}?") for i in range(40)])
    # the second file repeats two nq questions (one with other case and punctuation) under other ids
    other = write(
        tmp_path / "tqa.jsonl",
        [qa(100, "Who wrote book number 3"), qa(101, "who wrote book number 30?")]
        + [qa(i, f"which river flows through city {i}?") for i in range(102, 130)],
    )
    return tmp_path, nq, other


def test_held_out_questions_never_train_by_id_or_by_normalised_text(files):
    tmp, nq, other = files
    heldout = [DatasetSpec("nq", nq, limit=10, seed=0)]
    report = build_split(
        heldout, [SourceSpec("nq", nq), SourceSpec("tqa", other)], tmp / "out", val_per_dataset=2
    )
    held = read(tmp / "out" / "heldout_nq.jsonl")
    assert [r["id"] for r in held] == [q.id for q in load_questions(heldout[0])], (
        "the evaluation's own sample"
    )
    train, val = read(tmp / "out" / "train.jsonl"), read(tmp / "out" / "val.jsonl")
    held_ids = {r["id"] for r in held}
    assert not held_ids & {r["id"] for r in train + val if r["dataset"] == "nq"}
    check_disjoint(train + val, held)  # raises on any overlap
    assert report.excluded_by_id == 10
    copies = {"q3", "q30"} & held_ids  # a held-out nq question repeated in the other file
    assert report.excluded_by_text == len(copies)
    assert report.duplicates == 2 - len(copies), "a repeat of a training question trains once"
    assert report.train + report.val == 40 - 10 + 30 - 2
    assert len(val) == 4 and {r["dataset"] for r in val} == {"nq", "tqa"}


def test_the_split_is_seeded(files):
    tmp, nq, other = files
    sources = [SourceSpec("nq", nq), SourceSpec("tqa", other)]
    heldout = [DatasetSpec("nq", nq, limit=10, seed=0)]
    build_split(heldout, sources, tmp / "a", seed=1)
    build_split(heldout, sources, tmp / "b", seed=1)
    assert (tmp / "a" / "train.jsonl").read_text() == (tmp / "b" / "train.jsonl").read_text()


def test_check_disjoint_names_the_training_question_that_is_held_out():
    held = [{"id": "h1", "question": "Who is the CEO?", "dataset": "nq"}]
    with pytest.raises(ValueError, match=r"'t7'.*held-out question 'h1'"):
        check_disjoint([{"id": "t7", "question": "who is the ceo", "dataset": "tqa"}], held)
    with pytest.raises(ValueError, match="id 'h1' of 'nq' is held out"):
        check_disjoint([{"id": "h1", "question": "something else", "dataset": "nq"}], held)


def test_a_source_limit_takes_a_seeded_sample_after_exclusion(files):
    tmp, nq, other = files
    report = build_split([], [SourceSpec("tqa", other, limit=5)], tmp / "out", val_per_dataset=0)
    assert report.train == 5 and report.per_source == {"tqa": 5}


def test_on_the_shared_data_the_results_questions_are_held_out(shared_data, tmp_path):
    heldout = default_heldout(shared_data, limit=500)
    report = build_split(heldout, [SourceSpec("nq", str(shared_data / "nq" / "test.jsonl"))], tmp_path)
    assert report.heldout == {"nq": 500, "hotpotqa": 500, "triviaqa": 500, "popqa": 500}
    assert report.excluded_by_id == 500 and report.train + report.val + 500 <= 3610
