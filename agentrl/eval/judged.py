"""Judged accuracy in the evaluation: each record's prediction scored by an LLM judge (``--judge``).

After the rule has scored a chunk of records (``records.py``), :func:`judge_records` asks the
judge (``rewards/judge.py``) about each record's ``prediction`` against its ``golden_answers``, one
``JudgeGroup`` per record (a question has one answer here), and stores the score as the record's
``judged`` (a float; a record without a prediction scores 0 and is not sent). Records are judged
before they are written, so a resumed evaluation keeps their values; the judge's URL, model and
mode are recorded in the settings (:func:`judge_header`), so judged and unjudged records (or two
judges' records) never share a results file. A record written without a judge has no ``judged``
field, and the report then shows no column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentrl.config.schema import JudgeConfig
from agentrl.rewards.judge import JudgeGroup, LLMJudge, judge_batch

__all__ = ["JUDGED", "judge_header", "judge_records", "make_judge"]

JUDGED = "judged"  # the record field and the summary metric


def make_judge(url: str, model: str, mode: str, cache_dir: str | None = None) -> LLMJudge:
    """The judge the ``--judge`` flags name; every other setting is ``JudgeConfig``'s default
    (a failed request's answer gets the exact-match fallback, counted in ``judge/fallbacks``).

    Raises ValueError naming ``--judge`` when ``url`` is not an http(s) base URL.
    """
    if not url.startswith(("http://", "https://")):
        raise ValueError(
            f"--judge must be the judge's http(s) base URL like 'http://host:8000' (POSTed at "
            f"/v1/chat/completions), got {url!r}"
        )
    return LLMJudge(JudgeConfig(url=url, model=model, mode=mode, cache_dir=cache_dir))


def judge_header(judge: LLMJudge) -> dict[str, Any]:
    """What the results file records of the judge: the settings its scores depend on."""
    return {"url": judge.config.url, "model": judge.config.model, "mode": judge.config.mode}


def judge_records(judge: LLMJudge, records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``records`` with ``judged``: the judge's score of each ``prediction`` (module docstring)."""
    groups = [JudgeGroup(str(r["question"]), [r["prediction"]], r["golden_answers"]) for r in records]
    scores = judge_batch(judge, groups) if groups else []
    return [{**r, JUDGED: float(score)} for r, (score,) in zip(records, scores, strict=True)]
