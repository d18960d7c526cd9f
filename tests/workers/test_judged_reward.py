"""The reward role with an LLM judge (``reward.judge.url``): each trajectory's answer judged in place
of the rule, against ``support.judge_stub.JudgeStub`` on 127.0.0.1 (lenient: an answer that holds a
gold answer is correct, where exact match is not), without Ray."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from support.judge_stub import JudgeStub

from agentrl.agent.collate import collate
from agentrl.agent.trajectory import PromptSpec, Segment, Step, Trajectory
from agentrl.config.schema import ExperimentConfig, JudgeConfig, RewardConfig
from agentrl.core.batch import Batch
from agentrl.workers.base import RunContext
from agentrl.workers.reward import RuleRewardWorker

FRANCE = ("What is the capital of France?", "Paris")
GERMANY = ("What is the capital of Germany?", "Berlin")


@pytest.fixture
def stub() -> Iterator[JudgeStub]:
    with JudgeStub() as server:
        yield server


def _trajectory(
    uid: str, answer: str | None, group: str = "g0", question: tuple[str, str] = FRANCE, steps: int = 1
) -> Trajectory:
    text, gold = question
    closed = [Step([1, 2], [5, 5], [Segment.MODEL] * 2, [0.0] * 2, [], [], []) for _ in range(steps - 1)]
    return Trajectory(
        prompt=PromptSpec([1, 2], "nq", {"target": [gold]}, extra_info={"question": text}),
        group_id=group,
        uid=uid,
        response_ids=[5] * 4,
        segments=[Segment.MODEL] * 4,
        log_probs=[0.0] * 4,
        finished=answer is not None,
        answer=answer,
        steps=closed,
    )


def _batch(*trajectories: Trajectory) -> Batch:
    batch = collate(list(trajectories), 0)
    batch["response_text"] = [f"<answer>{a}</answer>" for a in batch["answer"]]
    return batch


def _worker(url: str | None = None, **judge: object) -> RuleRewardWorker:
    config = JudgeConfig(url=url, timeout_s=2.0, retries=0, api_key_env="JUDGE_TEST_KEY", **judge)
    return RuleRewardWorker(RewardConfig(judge=config), RunContext.from_config(ExperimentConfig()))


def test_a_judged_row_gets_the_judges_verdict_even_where_exact_match_says_otherwise(stub):
    batch = _batch(
        _trajectory("wordy", "The capital is Paris"),
        _trajectory("wrong", "Rome"),
        _trajectory("exact", "Paris"),
        _trajectory("none", None),
    )
    scores, metrics = _worker(stub.url).compute_scores(batch)
    assert scores.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert metrics["reward/em"] == pytest.approx(0.25)  # the rule's metrics are still reported
    assert metrics["reward/judged"] == pytest.approx(0.5)
    assert stub.requests == 3 and metrics["judge/requests"] == 3  # the missing answer is never sent
    assert "What is the capital of France?" in stub.bodies[0]["messages"][-1]["content"]


def test_group_mode_sends_one_request_per_group_of_samples(stub):
    batch = _batch(
        _trajectory("a", "The capital is Paris", "g0"),
        _trajectory("b", "Lyon", "g0"),
        _trajectory("c", "Berlin, of course", "g1", GERMANY),
        _trajectory("d", "Munich", "g1", GERMANY),
        _trajectory("e", "Berlin", "g1", GERMANY),
    )
    scores, metrics = _worker(stub.url, mode="group").compute_scores(batch)
    assert scores.tolist() == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert stub.requests == 2 and metrics["judge/requests"] == 2
    assert "capital of Germany" in stub.bodies[1]["messages"][-1]["content"]


def test_a_multi_step_trajectory_is_sent_once_and_all_its_rows_get_its_score(stub):
    batch = _batch(_trajectory("long", "It is Paris", steps=3), _trajectory("short", "Rome"))
    assert batch["last_step"].tolist() == [False, False, True, True]
    scores, metrics = _worker(stub.url).compute_scores(batch)
    assert scores.tolist() == [1.0, 1.0, 1.0, 0.0]
    assert stub.requests == 2 and metrics["reward/judged"] == pytest.approx(0.5)


def test_the_judges_metrics_are_those_of_each_call(stub):
    worker = _worker(stub.url)
    for _ in range(2):
        _, metrics = worker.compute_scores(_batch(_trajectory("a", "Paris"), _trajectory("b", "Rome")))
        assert metrics["judge/requests"] == 2 and metrics["judge/fallbacks"] == 0


def test_without_a_url_the_rule_scores_are_unchanged_and_no_judge_metric_is_reported(stub):
    batch = _batch(_trajectory("wordy", "The capital is Paris"), _trajectory("exact", "Paris"))
    scores, metrics = _worker(None).compute_scores(batch)
    plain, plain_metrics = RuleRewardWorker(
        RewardConfig(), RunContext.from_config(ExperimentConfig())
    ).compute_scores(batch)
    assert scores.tolist() == plain.tolist() == [0.0, 1.0] and metrics == plain_metrics
    assert not any(k.startswith("judge/") or k == "reward/judged" for k in metrics) and stub.requests == 0


def test_a_harness_scored_trajectory_is_not_sent_and_the_penalties_apply_after_the_judge(stub):
    rated = _trajectory("rated", "Rome")
    rated.outcome_reward = 0.75
    malformed = _trajectory("malformed", "The capital is Paris")
    malformed.tool_calls_invalid = {"bad_json": 1}
    worker = RuleRewardWorker(
        RewardConfig(format_penalty=0.5, judge=JudgeConfig(url=stub.url, retries=0)),
        RunContext.from_config(ExperimentConfig()),
    )
    scores, metrics = worker.compute_scores(_batch(rated, malformed))
    assert torch.allclose(scores, torch.tensor([0.75, 0.5]))
    assert stub.requests == 1 and metrics["reward/harness_scored"] == 0.5


def test_a_row_without_its_question_fails_naming_the_field(stub):
    orphan = _trajectory("a", "Paris")
    orphan.prompt = PromptSpec([1, 2], "nq", {"target": ["Paris"]})
    with pytest.raises(KeyError, match=r"extra_info\['question'\].*row 0 \(data_source='nq'\)"):
        _worker(stub.url).compute_scores(_batch(orphan))
    assert stub.requests == 0
