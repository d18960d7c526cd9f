"""The web-search tool against a local server that speaks Serper's JSON (``support.serper_stub``).

The real API cannot be reached from here; the stub on 127.0.0.1 answers its request and
response fields, injects 429/500/slow answers and records every request with its arrival
time, so what is asserted is what reached the "network": the key's header, the body, how
many requests a cache hit or a retry costs, how far apart the rate limit keeps them.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time

import pytest
from support.dialects import Dialect
from support.prompts import question_prompt
from support.scripted_engine import ScriptedEngine, assert_rollout_invariants
from support.serper_stub import Fault, SerperStub

from agentrl.agent import LLMGenerationManager
from agentrl.config.schema import RolloutConfig, ToolConfig
from agentrl.tools.web.cache import SearchCache, cache_key, normalise_query
from agentrl.tools.web.client import WebSearchRejected, WebSearchUnavailable
from agentrl.tools.web.search import WebSearchTool

pytestmark = pytest.mark.timeout(60)

KEY = "stub-key-0123456789abcdef"
ENV = "SERPER_API_KEY"
CLASS_PATH = "agentrl.tools.web.search:WebSearchTool"


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(ENV, KEY)
    with SerperStub(KEY) as server:
        yield server


def fast_options(stub: SerperStub, cache_path, **options) -> dict:
    """Options for a tool on the stub: no rate limit and millisecond backoff unless a test says otherwise."""
    return {
        "base_url": stub.url,
        "cache_path": str(cache_path) if cache_path is not None else None,
        "requests_per_s": None,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
        **options,
    }


def make_tool(stub: SerperStub, cache_path, **options) -> WebSearchTool:
    return WebSearchTool(**fast_options(stub, cache_path, **options))


def ask(tool: WebSearchTool, *calls: dict):
    async def run():
        try:
            return await tool.call(list(calls))
        finally:
            await tool.close()

    return asyncio.run(run())


def metric(result, key: str, name: str = "web_search") -> float:
    return result.metrics[f"{name}/{key}"]


# --- what the policy reads, what the API receives --------------------------------------------


def test_the_top_results_come_back_as_title_snippet_and_link_with_the_key_in_its_header(stub, tmp_path):
    (result,) = ask(make_tool(stub, tmp_path / "c.sqlite3"), {"query": " capital of France ", "num": 3})
    assert result.text.split("\n\n") == [
        f"[{i}] capital of France result {i}\nSnippet {i} about capital of France.\n"
        f"https://example.org/capital-of-france/{i}"
        for i in (1, 2, 3)
    ]
    (seen,) = stub.seen
    assert seen.body == {"q": "capital of France", "num": 3}
    assert seen.headers["X-API-KEY"] == KEY
    assert result.metrics == {
        "web_search/requests": 1.0,
        "web_search/retries": 0.0,
        "web_search/cache_hits": 0.0,
        "web_search/cost_usd": pytest.approx(0.001),
    }


def test_a_long_answer_is_cut_to_max_chars_and_the_cut_is_said(stub, tmp_path):
    (result,) = ask(make_tool(stub, None, max_chars=150, max_num=10), {"query": "jupiter", "num": 10})
    body, note = result.text.rsplit("\n", 1)
    assert len(body) <= 150 and body.startswith("[1] jupiter result 1")
    assert note.startswith("[cut: 150 of ") and note.endswith(" characters shown]")


def test_the_num_default_and_bounds_are_the_schemas_and_the_options(stub, tmp_path):
    tool = make_tool(stub, None, num=2, max_num=4)
    assert tool.spec.parameters["properties"]["num"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 4,
        "description": "how many results to return (default 2)",
    }
    (result,) = ask(tool, {"query": "mars"})
    assert result.text.count("[") == 2 and stub.seen[0].body["num"] == 2
    plain = make_tool(stub, None, num_argument=False)
    assert list(plain.spec.parameters["properties"]) == ["query"]  # tags: the text between the tags
    with pytest.raises(ValueError, match="num <= max_num"):
        make_tool(stub, None, num=11, max_num=10)


def test_the_key_comes_only_from_the_named_environment_variable(stub, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV)
    with pytest.raises(ValueError, match=f"environment variable {ENV}"):
        make_tool(stub, None)
    pasted = "a1b2c3d4e5f6"  # the key itself where the variable's name belongs: refused, not echoed
    with pytest.raises(ValueError, match="not hold the key itself") as caught:
        make_tool(stub, None, api_key_env=pasted)
    assert pasted not in str(caught.value)
    monkeypatch.setenv("MY_SEARCH_KEY", KEY)
    ask(make_tool(stub, None, api_key_env="MY_SEARCH_KEY"), {"query": "venus"})
    assert stub.seen[0].headers["X-API-KEY"] == KEY and KEY not in repr(
        make_tool(stub, None, api_key_env="MY_SEARCH_KEY")
    )


# --- the cache ------------------------------------------------------------------------------


def test_a_cached_query_never_reaches_the_server_however_it_is_spaced_or_cased(stub, tmp_path):
    tool = make_tool(stub, tmp_path / "c.sqlite3")
    first, again, variant, other_num = ask(
        tool,
        {"query": "Capital of France", "num": 3},
        {"query": "Capital of France", "num": 3},
        {"query": "  capital   OF\tfrance ", "num": 3},
        {"query": "Capital of France", "num": 4},
    )
    assert stub.queries().count("Capital of France") == 2  # one per num: num is part of the key
    assert stub.count == 2
    assert [metric(r, "cache_hits") for r in (first, again, variant, other_num)] == [0.0, 1.0, 1.0, 0.0]
    assert [metric(r, "requests") for r in (first, again, variant, other_num)] == [1.0, 0.0, 0.0, 1.0]
    assert again.text == first.text == variant.text.replace("  capital   OF\tfrance ", "Capital of France")
    assert tool.totals == {
        "requests": 2.0,
        "retries": 0.0,
        "cache_hits": 2.0,
        "cost_usd": pytest.approx(0.002),
    }


def test_identical_calls_in_flight_share_one_request(stub, tmp_path):
    stub.inject(Fault(delay_s=0.3))  # the first answer is slow: the others arrive while it is out
    results = ask(make_tool(stub, None), *({"query": "saturn"} for _ in range(3)))
    assert stub.count == 1
    assert sorted(metric(r, "cache_hits") for r in results) == [0.0, 1.0, 1.0]
    assert len({r.text for r in results}) == 1


def test_the_cache_persists_across_tool_instances_and_expires_after_its_ttl(stub, tmp_path):
    path = tmp_path / "c.sqlite3"
    ask(make_tool(stub, path), {"query": "neptune"})
    (hit,) = ask(make_tool(stub, path), {"query": "neptune"})
    assert (stub.count, metric(hit, "cache_hits")) == (1, 1.0)
    time.sleep(0.3)
    (stale,) = ask(make_tool(stub, path, cache_ttl_s=0.2), {"query": "neptune"})
    assert (stub.count, metric(stale, "cache_hits")) == (2, 0.0)
    (fresh,) = ask(make_tool(stub, path, cache_ttl_s=0.2), {"query": "neptune"})  # rewritten just now
    assert (stub.count, metric(fresh, "cache_hits")) == (2, 1.0)


def _ask_many(url: str, path: str, queries: list[str], writes: int, tag: str) -> None:
    """A forked process: the tool's searches and raw cache writes, racing the other process."""
    tool = WebSearchTool(base_url=url, cache_path=path, requests_per_s=None)
    ask(tool, *({"query": q} for q in queries))
    cache = SearchCache(path)
    for i in range(writes):
        cache.put(f"{tag}-{i}", "raw", {"i": i})


def test_two_processes_share_one_cache_file(stub, tmp_path):
    path = str(tmp_path / "shared.sqlite3")
    shared = [f"shared question {i}" for i in range(8)]
    own = {tag: [f"{tag} question {i}" for i in range(4)] for tag in ("a", "b")}
    fork = multiprocessing.get_context("fork")
    workers = [
        fork.Process(target=_ask_many, args=(stub.url, path, shared + own[tag], 300, tag))
        for tag in ("a", "b")
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    assert [w.exitcode for w in workers] == [0, 0]
    cache = SearchCache(path)
    assert len(cache) == len(shared) + 8 + 2 * 300  # every answer and every raw write landed
    assert all(cache.get(f"{tag}-{i}") == {"i": i} for tag in ("a", "b") for i in range(300))
    before = stub.count
    assert before <= len(shared) * 2 + 8  # at most both processes missed a shared question at once
    results = ask(make_tool(stub, path), *({"query": q} for q in shared + own["a"] + own["b"]))
    assert stub.count == before and all(metric(r, "cache_hits") == 1.0 for r in results)


def test_the_cache_key_names_the_api_endpoint_and_parameters():
    assert normalise_query("  Ｐaris\tFRANCE  ") == "paris france"
    assert normalise_query('"Paris" France') != normalise_query("Paris France")
    base = cache_key("serper", "http://a/search", "Paris", num=3)
    assert base == cache_key("serper", "http://a/search", " paris ", num=3)
    assert len({base, cache_key("serper", "http://b/search", "Paris", num=3),
                cache_key("serper", "http://a/search", "Paris", num=4),
                cache_key("serper", "http://a/search", "Paris", num=3, gl="fr")}) == 4  # fmt: skip


# --- rate limit, retries, errors ------------------------------------------------------------


def test_the_rate_limit_spaces_requests(stub, tmp_path):
    rate = 10.0
    tool = make_tool(stub, None, requests_per_s=rate)
    start = time.monotonic()
    ask(tool, *({"query": f"moon {i}"} for i in range(5)))
    arrivals = sorted(s.at for s in stub.seen)
    # with burst 1 the k-th request may leave no earlier than k / rate after the calls start; a busy
    # machine can only delay requests, so this lower bound holds however loaded it is
    early = [round(at - start - k / rate, 3) for k, at in enumerate(arrivals) if at < start + k / rate - 0.01]
    assert len(arrivals) == 5 and not early, early


def test_429_and_500_are_retried_with_backoff_until_an_answer(stub, tmp_path):
    stub.inject(Fault(429), Fault(500, "backend down"))
    (result,) = ask(make_tool(stub, None, max_retries=3), {"query": "pluto"})
    assert result.text.startswith("[1] pluto result 1")
    assert stub.count == 3
    assert (metric(result, "requests"), metric(result, "retries")) == (3.0, 2.0)
    assert metric(result, "cost_usd") == pytest.approx(0.001)  # only the answer is billed


def test_retry_after_is_honoured(stub, tmp_path):
    stub.inject(Fault(429, headers={"Retry-After": "0.4"}))
    ask(make_tool(stub, None), {"query": "ceres"})  # backoff alone would wait <= 0.05 s
    first, second = (s.at for s in stub.seen)
    assert second - first >= 0.35


def test_a_slow_answer_times_out_and_is_retried(stub, tmp_path):
    stub.inject(Fault(delay_s=2.0))
    start = time.monotonic()
    (result,) = ask(make_tool(stub, None, request_timeout_s=0.3), {"query": "eris"})
    assert time.monotonic() - start < 1.9  # not the slow answer's 2 s
    assert (stub.count, metric(result, "retries")) == (2, 1.0)


def test_it_gives_up_after_max_retries_with_an_error_naming_the_attempts_and_the_apis_text(stub, tmp_path):
    stub.inject(*(Fault(500, "backend down") for _ in range(10)))
    tool = make_tool(stub, None, max_retries=2)
    with pytest.raises(WebSearchUnavailable, match=r"after 3 attempt\(s\).*HTTP 500: backend down"):
        ask(tool, {"query": "haumea"})
    assert stub.count == 3
    assert tool.totals["requests"] == 3.0 and tool.totals["retries"] == 2.0


def test_a_4xx_other_than_429_is_not_retried_and_names_the_status_and_the_apis_text(
    stub, tmp_path, monkeypatch
):
    monkeypatch.setenv(ENV, "wrong-key")
    with pytest.raises(WebSearchRejected, match=r"HTTP 403\): Unauthorized\."):
        ask(make_tool(stub, None), {"query": "makemake"})
    assert stub.count == 1
    monkeypatch.setenv(ENV, KEY)
    stub.inject(Fault(400, f"bad request for key {KEY}"))  # an API that echoes the key: scrubbed
    with pytest.raises(WebSearchRejected) as caught:
        ask(make_tool(stub, None), {"query": "sedna"})
    assert "HTTP 400" in str(caught.value) and KEY not in str(caught.value) and "***" in str(caught.value)
    assert stub.count == 2


def test_a_failed_call_in_a_batch_is_raised_after_the_others_were_answered_and_cached(stub, tmp_path):
    stub.inject(
        Fault(delay_s=0.2), Fault(403, "no credits")
    )  # the first asked answers late, the second fails
    tool = make_tool(stub, tmp_path / "c.sqlite3")
    with pytest.raises(WebSearchRejected, match="no credits"):
        ask(tool, {"query": "io"}, {"query": "europa"})
    (hit,) = ask(tool, {"query": "io"} if stub.seen[0].body["q"] == "io" else {"query": "europa"})
    assert metric(hit, "cache_hits") == 1.0


# --- in a rollout, in both formats, registered by config ------------------------------------


@pytest.mark.parametrize("dialect", [Dialect("tags"), Dialect("hermes")], ids=lambda d: d.name)
def test_the_tool_runs_in_a_rollout_in_both_formats_and_its_counters_reach_the_rollout_metrics(
    tokenizer, stub, tmp_path, dialect
):
    # tags: the query alone between the tags; hermes: the JSON arguments, num included
    options = fast_options(stub, tmp_path / "c.sqlite3", num_argument=dialect.name == "hermes", num=2)
    config = RolloutConfig(tools=[ToolConfig(CLASS_PATH, options)], max_turns=3, **dialect.config)
    value = "capital of France"

    def policy(context: str) -> str:
        if dialect.results_seen(context) == 0:
            return dialect.call("web_search", "query", value)
        return "<answer> Paris </answer>"

    engine = ScriptedEngine(tokenizer, policy)
    manager = LLMGenerationManager(
        engine, tokenizer, config, max_prompt_length=1024, max_response_length=2048
    )
    prompts = [question_prompt(tokenizer, "What is the capital of France?", index=i) for i in range(2)]
    result = manager.run(prompts)
    assert_rollout_invariants(result.trajectories, engine, tokenizer)
    for t in result.trajectories:
        assert (t.finished, t.tool_calls) == (True, {"web_search": 1})
        assert [text for _, text in t.tool_outputs][0].startswith("[1] capital of France result 1")
    assert stub.count == 1  # the second trajectory's identical call was shared or cached
    assert result.metrics["rollout/tool/web_search/requests"] == pytest.approx(0.5)  # mean per trajectory
    assert result.metrics["rollout/tool/web_search/cache_hits"] == pytest.approx(0.5)
    assert os.environ[ENV] not in repr(manager.tools)
