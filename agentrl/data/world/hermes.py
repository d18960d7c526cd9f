"""Scripted model turns in the ``hermes`` tool-call format: JSON calls to ``search`` and ``calculate``.

The same solutions as :mod:`.oracle` (which writes Search-R1's tags), written as a chat model
calls tools: each tool turn reasons in ``<think>``, then makes its calls as
``<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`` (the layout the project's
Hermes-style template renders), and the last turn answers in ``<answer>``. An arithmetic
question's two searches are independent: with ``parallel_searches`` one turn makes both calls
(they run in parallel), else one search a turn, each age restated right after its passage;
the next turn calls ``calculate`` on the two ages, and the last copies its result.

A search's ``query`` is the step's ``need`` ("the age of Bolfar Rildam"), not the tags
oracle's keywords ("Bolfar Rildam age"): inside JSON a query's first word follows a quote,
and a byte-level BPE gives a name there other tokens than after a space (``Bolfar`` vs
``ĠBolfar``), so a name opening the query is no longer a copy of the question's and a 2-layer
policy learns to recall names instead of copying them. Every name in a need follows a space.

Each turn ends with ``end_of_turn`` (pass the tokenizer's eos, e.g. ``<|im_end|>``: in this
format a turn ends at the template's end-of-turn token, which the policy writes).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .oracle import Turn, finding
from .questions import ChainStep, Question

__all__ = ["hermes_call", "hermes_guess_trajectory", "hermes_oracle_trajectory"]


def hermes_call(name: str, arguments: dict[str, Any]) -> str:
    """One call as the policy writes it (and the Hermes-style template renders it)."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _tool_turn(thought: str, calls: list[str], end_of_turn: str) -> Turn:
    body = "\n".join(calls)
    return Turn(f"<think> {thought} </think>\n{body}{end_of_turn}", body)


def _answer_turn(thought: str, answer: str, end_of_turn: str) -> Turn:
    return Turn(f"<think> {thought} </think>\n<answer> {answer} </answer>{end_of_turn}")


def hermes_oracle_trajectory(
    question: Question,
    *,
    search: tuple[str, str] = ("search", "query"),
    calculate: tuple[str, str] = ("calculate", "expression"),
    end_of_turn: str = "",
    parallel_searches: bool = True,
    restate: Callable[[ChainStep], str | None] | None = None,
) -> list[Turn]:
    """The ideal response as hermes turns; ``search`` / ``calculate``: each tool's (name, argument).

    One- and two-hop questions: one search per turn, as :func:`.oracle.oracle_trajectory` (the
    second query is built from the first answer). Arithmetic questions: both searches in one
    turn (one a turn without ``parallel_searches``), ``calculate`` on the chain's answers in the
    next, then the answer. Each search asks for
    the step's ``need`` (module docstring). A turn's ``query`` holds its calls (set: the
    environment answers the turn). ``restate``: how a step's finding is said where it is not
    :func:`.oracle.finding`'s "The age of X is N." (e.g. ``numbers.age_statement``: the passage's
    own sentence); a step it returns None for keeps the finding.
    """
    answer = question.golden_answers[0]
    known = [(restate(step) if restate else None) or finding(step) for step in question.chain]
    turns = []
    if question.calculation is None or not parallel_searches:
        for i, step in enumerate(question.chain):
            lead = "I need to find" if i == 0 else "Now I need to find"
            call = hermes_call(search[0], {search[1]: step.need})
            turns.append(_tool_turn(" ".join([*known[:i], f"{lead} {step.need}."]), [call], end_of_turn))
        if question.calculation is None:
            final = " ".join([*known, f"So the answer is {answer}."])
            return [*turns, _answer_turn(final, answer, end_of_turn)]
    else:
        needs = " and ".join(step.need for step in question.chain)
        searches = [hermes_call(search[0], {search[1]: step.need}) for step in question.chain]
        turns.append(_tool_turn(f"I need to find {needs}.", searches, end_of_turn))
    compute = hermes_call(calculate[0], {calculate[1]: question.calculation})
    return [
        *turns,
        _tool_turn(
            " ".join([*known, f"Now I need to compute {question.calculation}."]), [compute], end_of_turn
        ),
        _answer_turn(f"{question.calculation} is {answer}. So the answer is {answer}.", answer, end_of_turn),
    ]


def hermes_guess_trajectory(question: Question, guess: str, end_of_turn: str = "") -> list[Turn]:
    """A shortcut: answer ``guess`` at once, without a tool call (as :func:`.oracle.guess_trajectory`
    with no search: the turn opens "I already know …" where the oracle's opens "I need to find …")."""
    return [_answer_turn(f"I already know the answer: {guess}.", guess, end_of_turn)]
