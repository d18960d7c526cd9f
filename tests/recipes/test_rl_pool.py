"""The RL pool keeps the training questions the warm start solved when sampled (a scripted
policy over a real BM25 server stands in for the warm start)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.eval_toy import PASSAGES, QUESTIONS, searching_policy
from support.scripted_engine import ScriptedEngine
from support.toy_search import toy_retriever

from agentrl.config.schema import ExperimentConfig
from agentrl.data.qa import to_training_rows
from agentrl.recipes.rl_pool import solved_once

ROWS = to_training_rows(
    [{"id": i, "question": q, "golden_answers": g, "dataset": "toy"} for i, q, g in QUESTIONS], "train"
)
BUDGETS = {"max_tokens_per_turn": 64, "max_response_length": 512, "max_obs_length": 256, "batch_size": 4}
CONFIG = ExperimentConfig()  # the RL config the pool samples as (temperature 1)


@pytest.fixture(scope="module")
def retriever_url(tmp_path_factory: pytest.TempPathFactory):
    with toy_retriever(tmp_path_factory.mktemp("pool_retriever"), PASSAGES) as server:
        yield server.retrieve_url


def test_the_pool_keeps_exactly_the_questions_answered_in_the_answer_tag(tokenizer, retriever_url, tmp_path):
    # the policy answers with the first document's title: right for q1..q5, "Paris" for q6 (Seine)
    kept, summary = solved_once(
        ScriptedEngine(tokenizer, searching_policy),
        ROWS,
        retriever_url,
        tmp_path,
        limit=len(ROWS),
        seed=0,
        config=CONFIG,
        tokenizer=tokenizer,
        settings_overrides=BUDGETS,
    )
    assert [r["id"] for r in kept] == ["q1", "q2", "q3", "q4", "q5"]
    assert kept[0] is ROWS[0]  # the training rows themselves, ready to write
    assert summary == {"candidates": 6, "solved": 5, "solve_rate": pytest.approx(5 / 6)}
    header = json.loads((tmp_path / "predictions.jsonl").read_text().split("\n", 1)[0])
    decoding = header["settings"]["decoding"]
    assert decoding["greedy"] is False and decoding["temperature"] == 1.0
    assert header["settings"]["answer_rule"] == "tag"  # the RL reward's rule, not the lenient one


def test_the_pool_samples_a_seeded_subset_of_the_candidates(tokenizer, retriever_url, tmp_path: Path):
    def run(seed: int, out: Path) -> list[str]:
        solved_once(
            ScriptedEngine(tokenizer, searching_policy),
            ROWS,
            retriever_url,
            out,
            limit=3,
            seed=seed,
            config=CONFIG,
            tokenizer=tokenizer,
            settings_overrides=BUDGETS,
        )
        return [json.loads(line)["id"] for line in (out / "candidates.jsonl").read_text().splitlines()]

    first, again = run(1, tmp_path / "a"), run(1, tmp_path / "b")
    assert len(first) == 3 and first == again
    assert first == sorted(first)  # file order kept
    assert any(run(seed, tmp_path / f"s{seed}") != first for seed in (2, 3, 4))


def test_questions_sharing_an_id_across_sources_are_sampled_apart(tokenizer, retriever_url, tmp_path):
    # NQ and TriviaQA both number their questions test_0, test_1, ...
    twins = to_training_rows(
        [
            {"id": "test_0", "question": QUESTIONS[0][1], "golden_answers": QUESTIONS[0][2], "dataset": "nq"},
            {"id": "test_0", "question": QUESTIONS[5][1], "golden_answers": QUESTIONS[5][2], "dataset": "tq"},
        ],
        "train",
    )
    kept, summary = solved_once(
        ScriptedEngine(tokenizer, searching_policy),
        twins,
        retriever_url,
        tmp_path,
        limit=2,
        seed=0,
        config=CONFIG,
        tokenizer=tokenizer,
        settings_overrides=BUDGETS,
    )
    assert kept == [twins[0]] and summary["candidates"] == 2  # the Paris question, not the Seine one


def test_an_empty_candidate_list_is_refused(tokenizer, retriever_url, tmp_path):
    with pytest.raises(ValueError, match="no candidate rows"):
        solved_once(
            ScriptedEngine(tokenizer, searching_policy),
            [],
            retriever_url,
            tmp_path,
            limit=4,
            seed=0,
            config=CONFIG,
        )
