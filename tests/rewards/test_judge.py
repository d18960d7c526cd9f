"""The LLM judge against a real local server speaking OpenAI's chat-completions JSON.

Every test talks HTTP to ``support.judge_stub.JudgeStub`` on 127.0.0.1, with latencies and
timeouts of a fraction of a second. The stub's judge is more lenient than EM (an answer that
contains a gold answer is correct), so a score shows whether it came from the judge or from the
EM fallback.
"""

from __future__ import annotations

import asyncio
import json
from typing import get_args

import pytest
from support.judge_stub import Fault, JudgeStub

from agentrl.config.schema import JudgeConfig, JudgeFailure, JudgeMode
from agentrl.ports import free_port
from agentrl.rewards.judge import (
    JUDGE_FAILURES,
    JUDGE_MODES,
    JudgeError,
    JudgeGroup,
    LLMJudge,
    judge_batch,
)
from agentrl.rewards.judge_prompts import MalformedReply, parse_group_scores, parse_verdict

PARIS = ["Paris"]


@pytest.fixture
def stub():
    with JudgeStub() as server:
        yield server


def config(url: str, **overrides) -> JudgeConfig:
    settings = {
        "url": url,
        "timeout_s": 2.0,
        "retries": 0,
        "backoff_s": 0.01,
        "api_key_env": "JUDGE_TEST_KEY",
    }
    return JudgeConfig(**(settings | overrides))


def capital_of_france(*answers: str | None) -> JudgeGroup:
    return JudgeGroup("What is the capital of France?", list(answers), PARIS)


def test_the_judge_choices_are_the_config_schemas_literal_choices():
    assert get_args(JudgeMode) == JUDGE_MODES
    assert get_args(JudgeFailure) == JUDGE_FAILURES


def test_pointwise_verdicts_score_one_and_zero_and_a_missing_answer_is_never_sent(stub, monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")
    judge = LLMJudge(config(stub.url, model="judge-7b", max_tokens=32))
    scores = judge_batch(judge, [capital_of_france("It is Paris.", "Lyon", None)])
    assert scores == [[1.0, 0.0, 0.0]]  # "It is Paris." is not EM: the judge scored it
    assert stub.requests == 2
    body = stub.bodies[0]
    assert body["model"] == "judge-7b" and body["temperature"] == 0 and body["max_tokens"] == 32
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert all(h["Authorization"] == "Bearer sk-test" for h in stub.headers)


def test_without_the_key_variable_no_authorization_header_is_sent(stub, monkeypatch):
    monkeypatch.delenv("JUDGE_TEST_KEY", raising=False)
    judge_batch(LLMJudge(config(stub.url)), [capital_of_france("Paris")])
    assert "Authorization" not in stub.headers[0]


def test_no_more_requests_are_in_flight_than_max_concurrency():
    with JudgeStub(latency_s=0.05) as stub:
        judge = LLMJudge(config(stub.url, max_concurrency=4))
        scores = judge_batch(judge, [capital_of_france(*(f"Paris, answer {i}" for i in range(12)))])
        assert scores == [[1.0] * 12]
        assert stub.requests == 12 and stub.max_in_flight == 4
        stub.max_in_flight = 0

        async def two_calls_at_once():
            halves = [[capital_of_france(*(f"Paris, {half}{i}" for i in range(6)))] for half in "ab"]
            return await asyncio.gather(*(judge.score(groups) for groups in halves))

        assert asyncio.run(two_calls_at_once()) == [[[1.0] * 6], [[1.0] * 6]]
    assert stub.requests == 24 and stub.max_in_flight == 4  # the bound is the judge's, not one call's


def test_a_repeated_request_is_answered_from_the_disk_cache_without_a_second_call(stub, tmp_path):
    settings = config(stub.url, cache_dir=str(tmp_path / "judge_cache"))
    groups = [capital_of_france("It is Paris.", "Lyon")]
    first = judge_batch(LLMJudge(settings), groups)
    assert stub.requests == 2
    fresh = LLMJudge(settings)  # a new client, as in a new run: only the directory is shared
    assert judge_batch(fresh, groups) == first
    assert stub.requests == 2
    assert fresh.metrics()["judge/cache_hits"] == 2 and fresh.metrics()["judge/requests"] == 0
    assert not list((tmp_path / "judge_cache").rglob("*.tmp"))  # written atomically: no leftovers


def test_identical_requests_of_one_call_are_sent_once(stub):
    judge = LLMJudge(config(stub.url))
    assert judge_batch(judge, [capital_of_france("Paris", "Paris", "Lyon")]) == [[1.0, 1.0, 0.0]]
    assert stub.requests == 2 and judge.metrics()["judge/duplicates"] == 1


@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_429_or_5xx_is_retried_with_backoff_and_then_succeeds(stub, status):
    stub.inject(Fault(status=status), Fault(status=status))
    judge = LLMJudge(config(stub.url, retries=2))
    assert judge_batch(judge, [capital_of_france("It is Paris.")]) == [[1.0]]
    metrics = judge.metrics()
    assert stub.requests == 3 and metrics["judge/requests"] == 3
    assert metrics[f"judge/failures/http_{status}"] == 2 and metrics["judge/fallbacks"] == 0


def test_a_4xx_other_than_429_is_not_retried_and_falls_back(stub):
    stub.inject(Fault(status=400))
    judge = LLMJudge(config(stub.url, retries=3))
    assert judge_batch(judge, [capital_of_france("It is Paris.")]) == [[0.0]]  # EM of the fallback
    metrics = judge.metrics()
    assert stub.requests == 1 and metrics["judge/failures/http_400"] == 1 and metrics["judge/fallbacks"] == 1


def test_a_refused_connection_is_retried_then_scored_by_the_fallback():
    judge = LLMJudge(config(f"http://127.0.0.1:{free_port()}", retries=1))  # nothing listens there
    assert judge_batch(judge, [capital_of_france("paris", "It is Paris.")]) == [[1.0, 0.0]]
    metrics = judge.metrics()
    assert metrics["judge/failures/connection"] == 4 and metrics["judge/fallbacks"] == 2


def test_a_timeout_falls_back_to_exact_match_and_is_counted(stub):
    stub.inject(Fault(delay_s=2.0), Fault(delay_s=2.0))
    judge = LLMJudge(config(stub.url, timeout_s=0.2, retries=2))
    scores = judge_batch(judge, [capital_of_france("paris", "It is Paris.")])
    assert scores == [[1.0, 0.0]]  # EM: "paris" matches, "It is Paris." does not
    metrics = judge.metrics()
    assert stub.requests == 2  # a timeout is not retried
    assert metrics["judge/failures/timeout"] == 2 and metrics["judge/fallbacks"] == 2
    assert metrics["judge/latency_p95_s"] >= 0.2


def test_a_timeout_under_on_failure_raise_names_the_config_key_and_the_url(stub):
    stub.inject(Fault(delay_s=2.0))
    judge = LLMJudge(config(stub.url, timeout_s=0.2, on_failure="raise"))
    with pytest.raises(JudgeError, match=r"reward\.judge\.timeout_s") as error:
        judge_batch(judge, [capital_of_france("Paris")])
    assert stub.url in str(error.value) and "timeout" in str(error.value)


def test_a_malformed_verdict_is_a_counted_failure_scored_by_the_fallback_never_a_silent_zero():
    with JudgeStub(reply=lambda body: "Looks right to me.") as stub:
        judge = LLMJudge(config(stub.url, retries=2))
        assert judge_batch(judge, [capital_of_france("Paris", "Lyon")]) == [[1.0, 0.0]]
    metrics = judge.metrics()
    assert stub.requests == 2  # the same question at temperature 0 would get the same reply
    assert metrics["judge/failures/malformed"] == 2 and metrics["judge/fallbacks"] == 2


def test_group_mode_scores_all_answers_of_a_question_in_one_request(stub):
    judge = LLMJudge(config(stub.url, mode="group"))
    groups = [capital_of_france("It is Paris.", None, "Lyon"), JudgeGroup("2+2?", ["4", "five"], "4")]
    assert judge_batch(judge, groups) == [[1.0, 0.0, 0.0], [1.0, 0.0]]
    assert stub.requests == 2
    sent = json.loads(stub.bodies[0]["messages"][-1]["content"].rsplit("in order): ", 1)[1])
    assert sent == ["It is Paris.", "Lyon"]  # the missing answer is not shown to the judge


@pytest.mark.parametrize(
    "reply",
    ['{"scores": [1.0]}', '{"scores": [1.0, 0.5, 0.0]}', '{"scores": [1.0, 1.5]}', "scores: 1, 0"],
    ids=["too-few", "too-many", "out-of-range", "not-json"],
)
def test_group_mode_refuses_a_wrong_count_an_out_of_range_score_or_bad_json(reply):
    with JudgeStub(reply=lambda body: reply) as stub:
        judge = LLMJudge(config(stub.url, mode="group"))
        assert judge_batch(judge, [capital_of_france("paris", "It is Paris.")]) == [[1.0, 0.0]]
    assert judge.metrics()["judge/failures/malformed"] == 1 and judge.metrics()["judge/fallbacks"] == 2


def test_the_cost_comes_from_the_replies_usage_and_the_configured_prices():
    with JudgeStub(usage=(1000, 20)) as stub:
        priced = LLMJudge(config(stub.url, price_in_per_mtok=2.0, price_out_per_mtok=10.0))
        judge_batch(priced, [capital_of_france("Paris", "Lyon", "Rome")])
        free = LLMJudge(config(stub.url))
        judge_batch(free, [capital_of_france("Berlin")])
    metrics = priced.metrics(reset=True)
    assert metrics["judge/prompt_tokens"] == 3000 and metrics["judge/completion_tokens"] == 60
    assert metrics["judge/cost_usd"] == pytest.approx((3000 * 2.0 + 60 * 10.0) / 1e6)
    assert priced.metrics()["judge/requests"] == 0  # reset
    assert free.metrics()["judge/cost_usd"] == 0.0


def test_judge_batch_works_from_the_thread_of_a_running_event_loop(stub):
    judge = LLMJudge(config(stub.url))

    async def synchronous_code_under_a_coroutine():
        return judge_batch(judge, [capital_of_france("It is Paris.")])

    assert asyncio.run(synchronous_code_under_a_coroutine()) == [[1.0]]


def test_a_judge_without_a_url_or_with_an_unknown_fallback_is_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"reward\.judge\.url is not set"):
        LLMJudge(JudgeConfig())
    with pytest.raises(ValueError, match=r"reward\.judge\.fallback_metric must be one of"):
        LLMJudge(JudgeConfig(url="http://127.0.0.1:1", fallback_metric="bleu"))


@pytest.mark.parametrize(
    ("content", "score"),
    [
        ("VERDICT: CORRECT", 1.0),
        ("The gold answer is Paris.\n  VERDICT: INCORRECT  \n", 0.0),
    ],
)
def test_a_verdict_is_one_line_of_the_documented_form(content, score):
    assert parse_verdict(content) == score


@pytest.mark.parametrize(
    "content",
    ["CORRECT", "VERDICT: correct", "VERDICT: CORRECT.", "VERDICT: CORRECT\nVERDICT: INCORRECT", ""],
)
def test_anything_but_exactly_one_verdict_line_is_malformed(content):
    with pytest.raises(MalformedReply):
        parse_verdict(content)


def test_group_scores_may_come_in_one_fenced_block_but_never_as_booleans():
    assert parse_group_scores('```json\n{"scores": [0, 0.5, 1]}\n```', 3) == [0.0, 0.5, 1.0]
    with pytest.raises(MalformedReply, match=r"scores\[1\]"):
        parse_group_scores('{"scores": [1, true]}', 2)
