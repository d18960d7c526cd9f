"""Which answer a record scores: the answer-extraction rule of an evaluation.

Two rules, chosen per evaluation (``EvalSettings.answer_rule``, ``--answer-rule``) and
applied alike to every row of a table (direct, rag and agent):

* ``tag`` (the default, the Search-R1 protocol and the training reward): the answer the
  rollout accepted, i.e. the body of the ``<answer>…</answer>`` one model turn wrote to end
  the trajectory; without one there is no prediction.
* ``tag-or-first-line`` (the fair baseline protocol, for models that answer in prose):
  the accepted answer when there is one. Otherwise the prediction is read from the text of
  the last model turn (the model's tokens after the last observation, special tokens left
  out):

  1. if that text has an ``<answer>`` with no ``</answer>`` after it (cut by the token
     budget), the candidate is the text after the last such ``<answer>``; otherwise it is
     the whole text;
  2. from the candidate, ``<think>`` and ``<search>`` blocks are dropped (from the opening
     tag through the closing tag, or through the end when unclosed), then every remaining
     ``<think>``, ``<search>``, ``<information>`` or ``<answer>`` tag, opening or closing,
     is removed (the text between tags stays);
  3. the prediction is the first non-empty line, cut at its first sentence end (the first
     ``". "``, ``"! "`` or ``"? "``: the punctuation mark is kept, the rest of the line
     dropped; the whole line when it has none), capped at its first 20 words (split on
     whitespace, joined by one space, after step 4);
  4. a leading "The answer is", "The answer to this question is", "Final answer:" or "Answer:"
     (any case, colon optional) is removed, then quotes around what is left.

  An empty result means no prediction. ``extracted`` is true exactly when the prediction
  came from steps 1–4 rather than from an accepted tag.

The rule is deliberately simple and the same for every model and mode: it never looks at
the golden answers, the question or the documents, so it cannot favour a system.
"""

from __future__ import annotations

import re

__all__ = ["ANSWER_RULES", "MAX_FALLBACK_WORDS", "check_answer_rule", "first_line_answer", "predict"]

ANSWER_RULES: tuple[str, ...] = ("tag", "tag-or-first-line")
MAX_FALLBACK_WORDS = 20

_OPEN_ANSWER = "<answer>"
_CLOSE_ANSWER = "</answer>"
# a think or search block through its closing tag, or through the end of the text when unclosed
_DROPPED_BLOCK = re.compile(r"<(think|search)>.*?(?:</\1>|\Z)", re.DOTALL)
_ANY_TAG = re.compile(r"</?(?:think|search|information|answer)>")
_SENTENCE_END = re.compile(r"[.!?] ")
# "The answer is:", "The answer to this question is", "Answer:" (step 4; case-insensitive)
_LEAD_IN = re.compile(
    r"^(?:the\s+)?(?:final\s+|correct\s+)?answer(?:\s+to\s+(?:this|the)\s+question)?(?:\s+is)?\s*:?\s+", re.I
)


def check_answer_rule(rule: str, name: str = "answer_rule") -> str:
    """``rule`` if it is one of :data:`ANSWER_RULES`; a ``ValueError`` naming ``name`` otherwise."""
    if rule not in ANSWER_RULES:
        raise ValueError(f"{name} must be one of {ANSWER_RULES}, got {rule!r}")
    return rule


def first_line_answer(turn_text: str) -> str | None:
    """Steps 1–4 of ``tag-or-first-line`` (module docstring) on the text of the last model turn.

    None when nothing is left (an empty turn, a turn that only thought or searched).
    """
    if not isinstance(turn_text, str):
        raise TypeError(f"turn_text must be a str, got {type(turn_text).__name__}")
    candidate = turn_text
    opened = turn_text.rfind(_OPEN_ANSWER)
    if opened >= 0 and turn_text.find(_CLOSE_ANSWER, opened) < 0:
        candidate = turn_text[opened + len(_OPEN_ANSWER) :]
    candidate = _ANY_TAG.sub(" ", _DROPPED_BLOCK.sub(" ", candidate))
    line = next((ln.strip() for ln in candidate.splitlines() if ln.strip()), "")
    end = _SENTENCE_END.search(line)
    if end is not None:
        line = line[: end.start() + 1]
    line = _LEAD_IN.sub("", line, count=1).strip().strip("\"'“”‘’").strip()
    words = line.split()[:MAX_FALLBACK_WORDS]
    return " ".join(words) or None


def predict(accepted: str | None, last_turn_text: str, rule: str = "tag") -> tuple[str | None, bool]:
    """``(prediction, extracted)`` of one trajectory under ``rule`` (module docstring).

    ``accepted``: the answer the rollout accepted (``Trajectory.answer``); it always wins.
    ``last_turn_text``: what the model wrote in its last turn, read only by the fallback.
    """
    check_answer_rule(rule)
    if accepted is not None or rule == "tag":
        return accepted, False
    fallback = first_line_answer(last_turn_text)
    return fallback, fallback is not None
