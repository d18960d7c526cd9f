"""The LLM judge's prompts and the strict parsing of its replies, one pair per judge mode.

* pointwise (verifiers/ASearcher style): one answer against the gold answers; the reply must
  hold exactly one line that reads ``VERDICT: CORRECT`` or ``VERDICT: INCORRECT`` (any lines of
  reasoning around it are allowed), scored 1.0 or 0.0.
* group (ART's RULER style): all answers to one question in one request, judged relative to
  each other; the reply must be a JSON object ``{"scores": [s_1, ..., s_n]}`` (optionally in one
  fenced code block) with exactly one number in [0, 1] per answer, in the order given.

Anything else is a ``MalformedReply``: the caller counts it and treats it as a failed request,
never as a score of 0.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence

__all__ = [
    "MalformedReply",
    "group_messages",
    "parse_group_scores",
    "parse_verdict",
    "pointwise_messages",
]

VERDICTS = {"VERDICT: CORRECT": 1.0, "VERDICT: INCORRECT": 0.0}
_FENCE = re.compile(r"\A```(?:json)?[ \t]*\n(.*)\n```\Z", re.DOTALL)

POINTWISE_SYSTEM = (
    "You grade an answer to a question against the question's gold answers. The predicted answer "
    "is correct when it names the same thing as at least one gold answer, even in other words; it "
    "is incorrect when it names something else, is only partly right, hedges between several "
    "answers or does not answer. Reason briefly if you need to, then end your reply with one line "
    "that is exactly `VERDICT: CORRECT` or exactly `VERDICT: INCORRECT`."
)
GROUP_SYSTEM = (
    "You grade several answers to the same question against the question's gold answers. Score "
    "each answer from 0 to 1: 1 when it names the same thing as a gold answer (in any words), 0 "
    "when it is wrong or does not answer, in between when it is partly right. Compare the answers "
    "with each other so that better answers never score lower than worse ones. Reply with only a "
    'JSON object {"scores": [s_1, ..., s_n]}: exactly one number per answer, in the order given.'
)


class MalformedReply(ValueError):
    """The judge's reply does not follow the form its prompt asked for (the message says how)."""


def pointwise_messages(question: str, answer: str, golds: Sequence[str]) -> list[dict[str, str]]:
    """The chat messages that ask for one verdict on ``answer``."""
    user = (
        f"Question: {question}\n"
        f"Gold answers (JSON list): {json.dumps(list(golds), ensure_ascii=False)}\n"
        f"Predicted answer: {answer}"
    )
    return [{"role": "system", "content": POINTWISE_SYSTEM}, {"role": "user", "content": user}]


def group_messages(question: str, answers: Sequence[str], golds: Sequence[str]) -> list[dict[str, str]]:
    """The chat messages that ask for one score per answer of ``answers``, in order."""
    # A JSON list delimits answers that span lines or contain numbering of their own.
    user = (
        f"Question: {question}\n"
        f"Gold answers (JSON list): {json.dumps(list(golds), ensure_ascii=False)}\n"
        f"There are {len(answers)} answers to score (JSON list, in order): "
        f"{json.dumps(list(answers), ensure_ascii=False)}"
    )
    return [{"role": "system", "content": GROUP_SYSTEM}, {"role": "user", "content": user}]


def parse_verdict(content: str) -> float:
    """1.0 or 0.0 from the one verdict line of ``content``; ``MalformedReply`` for none or several."""
    found = [VERDICTS[line.strip()] for line in content.splitlines() if line.strip() in VERDICTS]
    if len(found) != 1:
        raise MalformedReply(
            f"expected exactly one line 'VERDICT: CORRECT' or 'VERDICT: INCORRECT', found {len(found)} "
            f"in {_snippet(content)}"
        )
    return found[0]


def parse_group_scores(content: str, n: int) -> list[float]:
    """The ``n`` scores of ``{"scores": [...]}`` in ``content``; ``MalformedReply`` unless exactly
    ``n`` finite numbers (not booleans), each in [0, 1]."""
    text = content.strip()
    fenced = _FENCE.match(text)
    try:
        reply = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        raise MalformedReply(f"expected a JSON object {{'scores': [...]}}, got {_snippet(content)}") from None
    scores = reply.get("scores") if isinstance(reply, dict) else None
    if not isinstance(scores, list):
        raise MalformedReply(f"expected a JSON object with a 'scores' list, got {_snippet(content)}")
    if len(scores) != n:
        raise MalformedReply(f"expected {n} scores, one per answer, got {len(scores)}")
    for i, score in enumerate(scores):
        number = isinstance(score, (int, float)) and not isinstance(score, bool)
        if not number or not math.isfinite(score) or not 0 <= score <= 1:
            raise MalformedReply(f"scores[{i}] must be a number in [0, 1], got {score!r}")
    return [float(score) for score in scores]


def _snippet(content: str, limit: int = 120) -> str:
    return repr(content if len(content) <= limit else content[:limit] + "…")
