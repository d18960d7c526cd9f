"""The LLM judge: answers scored by asking an OpenAI-compatible chat-completions endpoint.

``LLMJudge(config).score(groups)`` scores every answer of every ``JudgeGroup`` (one question,
its gold answers, the answers to judge) and returns the scores in the same shape;
``judge_batch(judge, groups)`` does the same for synchronous callers. ``config`` is
``reward.judge`` (``JudgeConfig`` in ``config/schema.py``):

* ``mode``: ``pointwise`` sends one request per answer and scores its verdict 1.0 or 0.0;
  ``group`` sends one request per question with all its answers and takes one score in [0, 1]
  per answer (the prompts and the strict parsing of the replies: ``judge_prompts.py``). An
  answer that is None (the rollout accepted none) scores 0.0 and is never sent.
* Each request is ``POST {url}/v1/chat/completions`` with ``model``, ``messages``,
  ``temperature: 0`` and ``max_tokens``, and a bearer key from the environment variable
  ``api_key_env`` when it is set. At most ``max_concurrency`` are in flight at once (per event
  loop); identical requests of one call are sent once.
* With ``cache_dir``, a request already judged (the same URL, mode and body) is read from disk
  and not sent (``judge_cache.py``), across runs.
* A connection error, a 429 or a 5xx is retried up to ``retries`` times, after
  ``backoff_s`` × 2^k (jittered); other 4xx are not. A request gets ``timeout_s`` and a timeout is
  not retried (a judge that slow is overloaded, and each retry would stall the reward step again).
* A request that failed for good (timeout, retries spent, a 4xx) or whose reply is malformed is
  never a silent 0: with ``on_failure: fallback`` its answers get the rule score
  ``fallback_metric`` (EM by default) and count in ``judge/fallbacks``; with ``raise`` a
  ``JudgeError`` names the URL and the config key to look at.

``LLMJudge.metrics()`` returns ``judge/requests`` (HTTP attempts sent, retries included),
``judge/cache_hits``, ``judge/duplicates`` (identical requests of one call not sent again),
``judge/latency_mean_s`` and ``judge/latency_p95_s`` (per attempt, failed ones included),
``judge/failures/<reason>`` per failed attempt (timeout, connection, malformed, http_<code>),
``judge/fallbacks`` (answers), ``judge/prompt_tokens``, ``judge/completion_tokens`` and
``judge/cost_usd`` (the replies' usage × ``price_in_per_mtok``/``price_out_per_mtok``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from agentrl.rewards.judge_cache import JudgeCache, request_key
from agentrl.rewards.judge_metrics import FAILURE_REASONS, JudgeMetrics
from agentrl.rewards.judge_prompts import (
    MalformedReply,
    group_messages,
    parse_group_scores,
    parse_verdict,
    pointwise_messages,
)
from agentrl.rewards.match import as_gold_list
from agentrl.rewards.scorers import MATCH_METRICS

__all__ = [
    "FAILURE_REASONS",
    "JUDGE_FAILURES",
    "JUDGE_MODES",
    "JudgeError",
    "JudgeGroup",
    "JudgeMetrics",
    "JudgeSettings",
    "LLMJudge",
    "judge_batch",
]

logger = logging.getLogger(__name__)

# The choices of reward.judge.mode and reward.judge.on_failure, as config/schema.py's JudgeMode and
# JudgeFailure spell them. rewards/ is a leaf that may not import config/ (docs/architecture.md),
# so they are repeated here; tests/rewards/test_judge.py checks they equal the Literals' get_args.
JUDGE_MODES: tuple[str, ...] = ("pointwise", "group")
JUDGE_FAILURES: tuple[str, ...] = ("fallback", "raise")

Fallback = Callable[[str, Sequence[str]], float]


class JudgeSettings(Protocol):
    """What the judge reads of its config: the fields of ``JudgeConfig`` (``reward.judge``)."""

    url: str | None
    model: str
    mode: str
    max_concurrency: int
    timeout_s: float
    retries: int
    backoff_s: float
    cache_dir: str | None
    on_failure: str
    fallback_metric: str
    price_in_per_mtok: float
    price_out_per_mtok: float
    api_key_env: str
    max_tokens: int


@dataclass(frozen=True)
class JudgeGroup:
    """The answers to one question, judged against its gold answers (a string or a list of them).
    An answer that is None (no accepted answer) scores 0.0 and is not sent to the judge."""

    question: str
    answers: Sequence[str | None]
    golds: str | Sequence[str]


class JudgeError(RuntimeError):
    """A judge request failed for good under ``reward.judge.on_failure=raise``."""


@dataclass(frozen=True)
class _Request:
    key: str  # the cache key, also what makes two requests of one call identical
    body: dict[str, Any]
    group: int  # the index of its JudgeGroup
    slots: tuple[int, ...]  # the indices of the answers it scores, in the order the reply scores them


@dataclass(frozen=True)
class _Failure:
    reason: str  # timeout, connection, malformed or http_<code>
    detail: str
    retryable: bool = False
    attempts: int = 1


# The config key to look at when a request fails for good, by reason (other HTTP codes: `_error`).
_KEY_OF_REASON = {
    "timeout": "reward.judge.timeout_s",
    "connection": "reward.judge.url",
    "malformed": "reward.judge.model",
    "http_401": "reward.judge.api_key_env",
    "http_403": "reward.judge.api_key_env",
    "http_429": "reward.judge.max_concurrency",
}


class LLMJudge:
    """Scores answers with an LLM judge (module docstring). ``fallback(answer, golds)``: the rule
    score of an answer whose request failed (default: ``config.fallback_metric``).

    Raises ValueError, naming the key, when ``config`` has no url or a choice out of range.
    """

    def __init__(self, config: JudgeSettings, fallback: Fallback | None = None) -> None:
        _check_settings(config)
        self.config = config
        self.endpoint = str(config.url).rstrip("/") + "/v1/chat/completions"
        self.fallback: Fallback = fallback or MATCH_METRICS[config.fallback_metric]
        self.cache = JudgeCache(config.cache_dir) if config.cache_dir else None
        key = os.environ.get(config.api_key_env)
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.stats = JudgeMetrics()
        self._slot_loop: asyncio.AbstractEventLoop | None = None
        self._slot_semaphore: asyncio.Semaphore | None = None

    def metrics(self, reset: bool = False) -> dict[str, float]:
        """The ``judge/...`` metrics since the judge was made or last reset; ``reset`` starts them over."""
        out = self.stats.as_dict(self.config.price_in_per_mtok, self.config.price_out_per_mtok)
        if reset:
            self.stats = JudgeMetrics()
        return out

    async def score(self, groups: Sequence[JudgeGroup]) -> list[list[float]]:
        """One score per answer of each group, in the groups' shape (module docstring).

        Raises ``JudgeError`` under ``on_failure=raise`` once every request of the call has ended.
        """
        requests = [request for index, group in enumerate(groups) for request in self._plan(index, group)]
        unique = {request.key: request for request in requests}
        self.stats.duplicates += len(requests) - len(unique)
        connector = aiohttp.TCPConnector(limit=0)  # the slots bound it, across concurrent calls too
        async with aiohttp.ClientSession(connector=connector) as session:
            outcomes = await asyncio.gather(*(self._resolve(session, r) for r in unique.values()))
        by_key = dict(zip(unique, outcomes, strict=True))
        failed = [outcome for outcome in outcomes if isinstance(outcome, _Failure)]
        if failed and self.config.on_failure == "raise":
            raise self._error(failed[0])
        scores = [[0.0] * len(group.answers) for group in groups]
        for request in requests:
            group, outcome = groups[request.group], by_key[request.key]
            for position, slot in enumerate(request.slots):
                if isinstance(outcome, _Failure):
                    self.stats.fallbacks += 1
                    answer = group.answers[slot]
                    scores[request.group][slot] = float(self.fallback(str(answer), as_gold_list(group.golds)))
                else:
                    scores[request.group][slot] = outcome[position]
        if failed:
            reasons = ", ".join(f"{r}: {n}" for r, n in sorted(Counter(f.reason for f in failed).items()))
            logger.warning(
                "LLM judge at %s: %d of %d request(s) failed (%s); their answers got the fallback score (%s)",
                self.endpoint,
                len(failed),
                len(unique),
                reasons,
                getattr(self.fallback, "__name__", "custom"),
            )
        return scores

    def _plan(self, index: int, group: JudgeGroup) -> list[_Request]:
        """The requests that score ``group``'s answers: one per answer, or one for all of them."""
        golds = as_gold_list(group.golds)
        answered = tuple(i for i, answer in enumerate(group.answers) if answer is not None)
        chunks = [answered] if self.config.mode == "group" else [(i,) for i in answered]
        requests = []
        for chunk in filter(None, chunks):  # a group with no answer asks nothing
            answers = [str(group.answers[i]) for i in chunk]
            if self.config.mode == "group":
                messages = group_messages(group.question, answers, golds)
            else:
                messages = pointwise_messages(group.question, answers[0], golds)
            body = {
                "model": self.config.model,
                "messages": messages,
                "temperature": 0,
                "max_tokens": self.config.max_tokens,
            }
            requests.append(_Request(request_key(self.endpoint, self.config.mode, body), body, index, chunk))
        return requests

    async def _resolve(self, session: aiohttp.ClientSession, request: _Request) -> list[float] | _Failure:
        """The scores of one request: from the cache, else from the judge; a ``_Failure`` if neither."""
        if self.cache is not None and (entry := self.cache.get(request.key)) is not None:
            try:
                scores = self._parse(entry.get("content"), len(request.slots))
            except MalformedReply:
                pass  # an entry this parser refuses (an older prompt's form) is a miss
            else:
                self.stats.cache_hits += 1
                return scores
        reply = await self._send(session, request.body)
        if isinstance(reply, _Failure):
            return reply
        try:
            scores = self._parse(reply, len(request.slots))
        except MalformedReply as exc:
            self.stats.failures["malformed"] += 1
            return _Failure("malformed", str(exc))
        if self.cache is not None:
            self.cache.put(request.key, {"content": reply})
        return scores

    def _parse(self, content: Any, n: int) -> list[float]:
        if not isinstance(content, str):
            raise MalformedReply(f"expected the message content as a string, got {type(content).__name__}")
        return parse_group_scores(content, n) if self.config.mode == "group" else [parse_verdict(content)]

    async def _send(self, session: aiohttp.ClientSession, body: dict[str, Any]) -> str | _Failure:
        """The reply's content, retried as the module docstring says; the last ``_Failure`` if none."""
        attempts = self.config.retries + 1
        for attempt in range(1, attempts + 1):
            async with self._slots():
                outcome = await self._attempt(session, body)
            if not isinstance(outcome, _Failure):
                return outcome
            self.stats.failures[outcome.reason] += 1
            if not outcome.retryable or attempt == attempts:
                break
            # waited outside the slot, so a backing-off request does not hold back the others
            cap = self.config.backoff_s * 2 ** (attempt - 1)
            await asyncio.sleep(random.uniform(cap / 2, cap))  # jitter spreads many samples' retries
        return _Failure(outcome.reason, outcome.detail, outcome.retryable, attempt)

    async def _attempt(self, session: aiohttp.ClientSession, body: dict[str, Any]) -> str | _Failure:
        """One HTTP request: the reply's content, or why there is none."""
        self.stats.requests += 1
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_s)
        start = time.monotonic()
        try:
            async with session.post(
                self.endpoint, json=body, headers=self._headers, timeout=timeout
            ) as reply:
                status, text = reply.status, await reply.text()
        except asyncio.TimeoutError:  # before ClientError: aiohttp's timeout errors are both
            return _Failure("timeout", f"no reply within {self.config.timeout_s:g}s")
        except (aiohttp.ClientError, OSError) as exc:
            return _Failure("connection", f"{type(exc).__name__}: {exc}", retryable=True)
        finally:
            self.stats.latencies_s.append(time.monotonic() - start)
        if not 200 <= status < 300:
            retryable = status == 429 or status >= 500
            return _Failure(f"http_{status}", f"HTTP {status}: {text[:200]!r}", retryable)
        return self._content(text)

    def _content(self, text: str) -> str | _Failure:
        """The message content of a chat-completions reply, its usage counted."""
        try:
            reply = json.loads(text)
            content = reply["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            return _Failure("malformed", f"not a chat-completions reply: {text[:200]!r}")
        usage = reply.get("usage")
        if isinstance(usage, dict):
            for name in ("prompt_tokens", "completion_tokens"):
                tokens = usage.get(name)
                if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0:
                    setattr(self.stats, name, getattr(self.stats, name) + tokens)
        if not isinstance(content, str):
            return _Failure("malformed", f"message content is {type(content).__name__}, not a string")
        return content

    def _slots(self) -> asyncio.Semaphore:
        """The running loop's semaphore of ``max_concurrency`` slots (a semaphore serves one loop)."""
        loop = asyncio.get_running_loop()
        if self._slot_semaphore is None or self._slot_loop is not loop:
            self._slot_semaphore = asyncio.Semaphore(self.config.max_concurrency)
            self._slot_loop = loop
        return self._slot_semaphore

    def _error(self, failure: _Failure) -> JudgeError:
        key = _KEY_OF_REASON.get(failure.reason)
        if key is None:
            key = "reward.judge.retries" if failure.retryable else "reward.judge.url and reward.judge.model"
        return JudgeError(
            f"LLM judge at {self.endpoint} failed ({failure.reason}: {failure.detail}) after "
            f"{failure.attempts} attempt(s); check {key}. reward.judge.on_failure=raise stops here; "
            f"'fallback' would score its answers by reward.judge.fallback_metric instead"
        )


def judge_batch(judge: LLMJudge, groups: Sequence[JudgeGroup]) -> list[list[float]]:
    """``judge.score(groups)`` for a synchronous caller (the reward role), same result and errors.

    In a thread with no running event loop it runs one (``asyncio.run``). Called from the thread
    of a running loop (sync code under a coroutine), it runs the scoring on a new loop in a helper
    thread and blocks this thread, and so that loop, until every request has ended.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(judge.score(groups))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="llm-judge") as pool:
        return pool.submit(asyncio.run, judge.score(groups)).result()


def _check_settings(config: JudgeSettings) -> None:
    """The choices the judge needs; the numbers are ``validate_config``'s (``config/checks.py``)."""
    if not config.url:
        raise ValueError(
            "reward.judge.url is not set: the LLM judge needs an OpenAI-compatible base URL "
            "(e.g. 'http://localhost:8000', POSTed at /v1/chat/completions)"
        )
    for key, value, choices in (
        ("mode", config.mode, JUDGE_MODES),
        ("on_failure", config.on_failure, JUDGE_FAILURES),
        ("fallback_metric", config.fallback_metric, tuple(MATCH_METRICS)),
    ):
        if value not in choices:
            raise ValueError(f"reward.judge.{key} must be one of {list(choices)}, got {value!r}")
    if config.max_concurrency < 1:
        raise ValueError(f"reward.judge.max_concurrency must be >= 1, got {config.max_concurrency}")
