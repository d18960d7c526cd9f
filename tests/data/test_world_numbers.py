"""The world's opt-in numeric facts and arithmetic questions, and the default world they leave alone."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from agentrl.data.world import (
    Question,
    generate_world,
    hermes_guess_trajectory,
    hermes_oracle_trajectory,
    oracle_hit_rate,
    oracle_trajectory,
    write_world,
)
from agentrl.data.world.numbers import age_statement
from agentrl.data.world.oracle import finding
from agentrl.tools.calculator import evaluate, format_number

SHORT_SIZES = {"num_countries": 6, "num_people": 12, "num_companies": 6, "num_distractors": 6}
# sha256 over write_world's files (name, then bytes, in name order), computed with the generator as it
# was before numeric facts existed (commit 53a730d): `make quickstart` (seed 0, full.yaml's sizes, which
# are generate_world's defaults) and `--short` (seed 0, short.yaml's sizes) must generate exactly it.
DEFAULT_WORLD_SHA256 = "2201967d92c3c3a0edb5938c66416187dda8d51aa45f9f30e723ca7f3ae15191"
SHORT_WORLD_SHA256 = "e808568aedff0c1dc175bc9e4b98977c4e721b183384a4d7cee62fb8ff585d6d"
EOS = "<|im_end|>"


def _digest(world, out: Path) -> str:
    write_world(world, out)
    h = hashlib.sha256()
    for path in sorted(out.iterdir()):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def worlds():
    return generate_world(seed=0), generate_world(seed=0, numbers=True)


def test_the_default_worlds_are_byte_identical_to_those_before_numeric_facts_existed(tmp_path: Path) -> None:
    assert _digest(generate_world(seed=0), tmp_path / "full") == DEFAULT_WORLD_SHA256
    assert _digest(generate_world(seed=0, **SHORT_SIZES), tmp_path / "short") == SHORT_WORLD_SHA256
    assert _digest(generate_world(seed=0, numbers=False), tmp_path / "off") == DEFAULT_WORLD_SHA256


def test_numbers_keep_the_hop_questions_and_their_split_and_only_add_age_sentences(worlds) -> None:
    default, numbers = worlds
    hop = [q for q in numbers.train_questions + numbers.test_questions if q.calculation is None]
    assert hop == default.train_questions + default.test_questions
    assert [p["id"] for p in numbers.passages] == [p["id"] for p in default.passages]
    year = re.compile(r" \S+ (was founded \d{2} years ago|is \d{2} years old)\.")
    changed = 0
    for old, new in zip(default.passages, numbers.passages, strict=True):
        changed += old["contents"] != new["contents"]
        assert year.sub("", new["contents"]) == old["contents"]
    assert changed == len(default.companies) + len(default.people)
    assert numbers.params == default.params | {"numbers": True}


def test_arithmetic_questions_need_two_passages_and_one_calculation(worlds) -> None:
    _, world = worlds
    passages = {p["id"]: p["contents"] for p in world.passages}
    arithmetic = [q for q in world.train_questions + world.test_questions if q.kind == "arithmetic"]
    test_share = sum(q.id.startswith("test_") for q in arithmetic) / len(arithmetic)
    assert len(arithmetic) >= len(world.companies) and 0.1 < test_share < 0.3
    assert {q.template for q in arithmetic} == {"founding_gap", "birth_gap"}
    assert len({q.question for q in arithmetic}) == len(arithmetic)
    for q in arithmetic:
        first, second = q.chain
        assert q.hop == 2 and first.passage_id != second.passage_id
        assert q.calculation == f"{first.answer} - {second.answer}"  # the older one's age first
        assert q.golden_answers == [format_number(evaluate(q.calculation))] and int(q.golden_answers[0]) > 0
        for step in q.chain:  # each two-digit age is read from its own passage, not from the other one
            assert len(step.answer) == 2
            assert f" {step.answer} years ago." in passages[step.passage_id] or (
                f" is {step.answer} years old." in passages[step.passage_id]
            )
        assert q.subject in q.question and q.subject in first.need
    ids = [q.id for q in world.train_questions] + [q.id for q in world.test_questions]
    assert len(set(ids)) == len(ids)


def test_practice_questions_only_add_training_pairs_that_no_held_out_question_names(worlds) -> None:
    _, plain = worlds
    world = generate_world(seed=0, numbers=True, arithmetic_practice=3)
    assert world.test_questions == plain.test_questions
    plain_train = plain.train_questions
    assert world.train_questions[: len(plain_train)] == plain_train
    practice = world.train_questions[len(plain_train) :]
    assert len(practice) > 2 * sum(q.calculation is not None for q in plain_train)
    assert all(q.calculation is not None for q in practice)
    held_out = {step.passage_id for q in world.test_questions if q.calculation for step in q.chain}
    every = world.train_questions + world.test_questions
    pairs = [tuple(step.passage_id for step in q.chain) for q in every if q.calculation]
    assert len(set(pairs)) == len(pairs)  # no pair asked twice
    assert not {step.passage_id for q in practice for step in q.chain} & held_out
    assert world.params == plain.params | {"arithmetic_practice": 3}
    assert [q.id for q in practice] == [f"train_{len(plain_train) + i}" for i in range(len(practice))]


def test_practice_questions_are_refused_without_numbers_or_below_zero() -> None:
    with pytest.raises(ValueError, match="arithmetic_practice needs numbers=True"):
        generate_world(seed=0, arithmetic_practice=1)
    with pytest.raises(ValueError, match="arithmetic_practice must be >= 0, got -1"):
        generate_world(seed=0, numbers=True, arithmetic_practice=-1)


def test_numbers_are_deterministic_by_seed(tmp_path: Path) -> None:
    a = _digest(generate_world(seed=3, numbers=True, **SHORT_SIZES), tmp_path / "a")
    b = _digest(generate_world(seed=3, numbers=True, **SHORT_SIZES), tmp_path / "b")
    c = _digest(generate_world(seed=4, numbers=True, **SHORT_SIZES), tmp_path / "c")
    assert a == b != c


def test_an_arithmetic_record_round_trips_and_other_records_carry_no_calculation(worlds, tmp_path) -> None:
    _, world = worlds
    paths = write_world(world, tmp_path)
    records = [json.loads(line) for line in paths["test"].read_text().splitlines()]
    assert all(("calculation" in r) == r["template"].endswith("_gap") for r in records)
    assert [Question.from_json(r) for r in records] == world.test_questions


def test_every_oracle_query_of_the_numbers_world_ranks_its_passage_first(worlds) -> None:
    _, world = worlds
    assert oracle_hit_rate(world)["top1"] == 1.0
    assert oracle_hit_rate(world, field="need")["top1"] == 1.0  # the hermes oracle's queries


def test_hermes_turns_make_the_oracle_calls_as_json_and_end_at_the_end_of_turn(worlds) -> None:
    _, world = worlds
    for kind in ("1hop", "2hop", "arithmetic"):
        q = next(q for q in world.train_questions if q.kind == kind)
        turns = hermes_oracle_trajectory(q, end_of_turn=EOS)
        assert all(t.text.endswith(EOS) and t.text.count(EOS) == 1 for t in turns)
        calls = [
            json.loads(body)
            for t in turns
            for body in re.findall(r"<tool_call>\n(.*?)\n</tool_call>", t.text, re.DOTALL)
        ]
        searches = [c["arguments"]["query"] for c in calls if c["name"] == "search"]
        assert searches == [step.need for step in q.chain]  # a phrase: every name follows a space
        assert [c["arguments"] for c in calls if c["name"] == "calculate"] == (
            [{"expression": q.calculation}] if q.calculation else []
        )
        assert turns[-1].query is None and f"<answer> {q.golden_answers[0]} </answer>" in turns[-1].text
        assert all(t.query is not None for t in turns[:-1])
        if kind == "arithmetic":  # both searches in one turn, then the calculation
            assert len(turns) == 3 and turns[0].text.count("<tool_call>") == 2
            one_a_turn = hermes_oracle_trajectory(q, end_of_turn=EOS, parallel_searches=False)
            assert [t.text.count("<tool_call>") for t in one_a_turn] == [1, 1, 1, 0]
            assert one_a_turn[1].text.startswith(f"<think> {finding(q.chain[0])} Now I need to find")
            assert one_a_turn[2:] == turns[1:]  # the same calculation and answer
        else:  # the same turns as the tags oracle, each call in JSON instead of <search>
            tags = [re.sub(r"<search> .* </search>", "", t.text) for t in oracle_trajectory(q)]
            ours = [
                re.sub(r"<tool_call>.*</tool_call>", "", t.text.removesuffix(EOS), flags=re.DOTALL)
                for t in turns
            ]
            assert ours == tags
    shortcut = hermes_guess_trajectory(q, q.subject, end_of_turn=EOS)
    assert [t.text for t in shortcut] == [
        f"<think> I already know the answer: {q.subject}. </think>\n<answer> {q.subject} </answer>{EOS}"
    ]


def test_an_age_is_restated_as_its_passages_own_sentence_and_other_findings_stay(worlds) -> None:
    _, world = worlds
    contents = {p["id"]: p["contents"] for p in world.passages}
    arithmetic = [q for q in world.train_questions if q.kind == "arithmetic"]
    templates = {q.template for q in arithmetic}
    assert templates == {"founding_gap", "birth_gap"}, templates  # both kinds of age are checked
    for q in arithmetic:
        for step in q.chain:
            said = age_statement(step)
            assert said is not None and f" {step.answer} years" in said
            assert said in contents[step.passage_id], (said, step.passage_id)
        turns = hermes_oracle_trajectory(q, end_of_turn=EOS, restate=age_statement)
        restated = " ".join(age_statement(step) for step in q.chain)
        assert turns[1].text.startswith(f"<think> {restated} Now I need to compute {q.calculation}.")
        plain = hermes_oracle_trajectory(q, end_of_turn=EOS)
        assert [t.text for t in turns[::2]] == [t.text for t in plain[::2]]  # only the findings differ
    hop = next(q for q in world.train_questions if q.kind == "2hop")
    assert all(age_statement(step) is None for step in hop.chain)
    assert hermes_oracle_trajectory(hop, restate=age_statement) == hermes_oracle_trajectory(hop)
