"""The synthetic world: determinism, uniqueness, splits, answerability and the oracle."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.data.world import (
    Question,
    Turn,
    generate_world,
    guess_trajectory,
    oracle_hit_rate,
    oracle_text,
    oracle_trajectory,
    write_world,
)
from agentrl.rewards import exact_match, extract_answer, parse_response

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def world():
    return generate_world(seed=0)


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_same_seed_same_files_different_seed_different(tmp_path: Path) -> None:
    a, b, c = (write_world(generate_world(seed=s), tmp_path / n) for s, n in [(7, "a"), (7, "b"), (8, "c")])
    fa, fb, fc = _files(a["corpus"].parent), _files(b["corpus"].parent), _files(c["corpus"].parent)
    assert set(fa) == {"corpus.jsonl", "train.jsonl", "test.jsonl", "world.json"}
    assert fa == fb
    assert all(fa[name] != fc[name] for name in fa)


def test_cli_writes_the_same_world(tmp_path: Path, world) -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "data" / "make_world.py"), "--out", str(tmp_path / "cli"), "--seed", "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout)["passages"] == len(world.passages)
    write_world(world, tmp_path / "api")
    assert _files(tmp_path / "cli") == _files(tmp_path / "api")


def test_names_are_unique_and_invented(world) -> None:
    names = (
        [c["name"] for c in world.countries]
        + [c["currency"] for c in world.countries]
        + [c["language"] for c in world.countries]
        + [c["name"] for c in world.cities]
        + [c["name"] for c in world.companies]
        + [w for p in world.people for w in p["name"].split()]
    )
    lowered = [n.lower() for n in names]
    assert len(set(lowered)) == len(lowered)
    assert all(re.fullmatch(r"[a-z]{4,}", n) for n in lowered)
    titles = [p["contents"].split("\n", 1)[0] for p in world.passages]
    assert len(set(titles)) == len(titles)
    assert len({p["id"] for p in world.passages}) == len(world.passages)


def test_passage_format_is_wiki18_style(world) -> None:
    for p in world.passages:
        title, text = p["contents"].split("\n", 1)
        assert re.fullmatch(r'"[^"\n]+"', title) and text.count(".") >= 3


def test_splits_are_disjoint_and_sized(world) -> None:
    train = {q.question for q in world.train_questions}
    test = {q.question for q in world.test_questions}
    assert not train & test
    assert len(train) == len(world.train_questions) and len(test) == len(world.test_questions)
    total = len(train) + len(test)
    assert len(test) == round(total * 0.2)
    assert {q.hop for q in world.test_questions} == {1, 2}
    assert {q.id for q in world.train_questions}.isdisjoint({q.id for q in world.test_questions})


def test_every_answer_is_in_its_gold_passage(world) -> None:
    text = {p["id"]: p["contents"] for p in world.passages}
    for q in world.train_questions + world.test_questions:
        assert q.golden_answers == [q.chain[-1].answer]
        for step in q.chain:
            assert step.answer in text[step.passage_id], (q.question, step)
        assert q.subject in q.question


def test_two_hop_questions_need_two_passages(world) -> None:
    text = {p["id"]: p["contents"] for p in world.passages}
    two_hop = [q for q in world.train_questions + world.test_questions if q.hop == 2]
    assert len(two_hop) > 100
    for q in two_hop:
        first, second = q.chain
        assert first.passage_id != second.passage_id
        assert q.golden_answers[0] not in text[first.passage_id], q.question  # no shortcut in hop 1
        assert q.subject not in text[second.passage_id], q.question  # hop 2 needs the bridge
        assert first.answer in second.query  # the second query uses what the first found


def test_oracle_queries_hit_bm25_top3(world) -> None:
    rates = oracle_hit_rate(world, k=3)
    assert rates["queries"] == sum(q.hop for q in world.train_questions + world.test_questions)
    assert rates["top3"] >= 0.95


def test_oracle_hit_rate_detects_bad_queries(world) -> None:
    # a world whose queries name nothing specific must score low: the check can fail
    from dataclasses import replace

    vague = replace(
        world,
        train_questions=[
            replace(q, chain=[replace(s, query="company") for s in q.chain]) for q in world.train_questions
        ],
        test_questions=[],
    )
    assert oracle_hit_rate(vague, k=3)["top3"] < 0.2


def test_oracle_trajectory_is_well_formed_and_correct(world) -> None:
    for q in world.test_questions[:60]:
        turns = oracle_trajectory(q)
        assert [t.query for t in turns[:-1]] == q.search_queries and turns[-1].query is None
        for t in turns[:-1]:
            assert t.text.endswith(f"<search> {t.query} </search>")
        assert turns[-1].text.endswith("</answer>")
        docs = [f"\n\n<information>Doc 1(Title: x) {s.answer}</information>\n\n" for s in q.chain]
        response = oracle_text(turns, docs)
        assert parse_response(response).well_formed
        assert exact_match(extract_answer(response), q.golden_answers) == 1.0
    assert oracle_trajectory(world.test_questions[0].id, world) == oracle_trajectory(world.test_questions[0])


def test_guess_trajectory_follows_the_oracle_then_answers_the_guess(world) -> None:
    two_hop = next(q for q in world.test_questions if q.hop == 2)
    oracle = oracle_trajectory(two_hop)
    for searches in (0, 1):
        turns = guess_trajectory(two_hop, "Nowhere", searches)
        assert turns[:searches] == oracle[:searches], (
            "the shortcut follows the oracle until it stops searching"
        )
        assert len(turns) == searches + 1 and turns[-1].query is None
        docs = [
            f"\n\n<information>Doc 1(Title: x) {s.answer}</information>\n\n" for s in two_hop.chain[:searches]
        ]
        response = oracle_text(turns, docs)
        assert parse_response(response).well_formed
        assert extract_answer(response) == "Nowhere"
        # The decision point: after restating what it found, the shortcut claims to know the
        # answer where the oracle goes on to search.
        known = "".join(f"{s.need[0].upper()}{s.need[1:]} is {s.answer}. " for s in two_hop.chain[:searches])
        assert turns[-1].text.startswith(f"<think> {known}I already know the answer: Nowhere.")
        assert (
            oracle[searches].text.startswith(f"<think> {known}")
            and "I already know" not in oracle[searches].text
        )
    with pytest.raises(ValueError, match=r"searches must be in \[0, 1\]"):
        guess_trajectory(two_hop, "Nowhere", 2)


def test_question_json_round_trip(world) -> None:
    for q in world.test_questions[:20]:
        assert Question.from_json(json.loads(json.dumps(q.to_json()))) == q
    with pytest.raises(ValueError, match="not a synthetic_world question record"):
        Question.from_json({"id": "x", "question": "q"})


def test_oracle_text_checks_observation_count() -> None:
    with pytest.raises(ValueError, match="1 search turns but 0 observations"):
        oracle_text([Turn("<search> q </search>", "q"), Turn("<answer> a </answer>")], [])


def test_bad_sizes_are_named() -> None:
    with pytest.raises(ValueError, match="num_countries must be an integer >= 2"):
        generate_world(num_countries=1)
    with pytest.raises(ValueError, match="test_fraction"):
        generate_world(test_fraction=1.0)
