"""Scripted model turns for the world's questions: the ideal (oracle) and the shortcut (guess) responses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .generation import World
from .questions import ChainStep, Question

__all__ = ["Turn", "finding", "guess_trajectory", "oracle_text", "oracle_trajectory"]


@dataclass(frozen=True)
class Turn:
    """A model segment of an oracle trajectory.

    ``text`` is what the model writes; when ``query`` is set, ``text`` ends with
    ``<search> query </search>`` and the environment inserts the retrieved documents next.
    The last turn has ``query=None`` and ends with the ``<answer>``.
    """

    text: str
    query: str | None = None


def finding(step: ChainStep) -> str:
    """What a search step established, as the oracle restates it: "The capital of X is Y.\""""
    return f"{step.need[0].upper()}{step.need[1:]} is {step.answer}."


def oracle_trajectory(question: Question | str, world: World | None = None) -> list[Turn]:
    """The ideal response as model turns, for an SFT warm start.

    Each search turn reasons about what is missing and issues the verified query; the
    environment inserts the retrieved documents after it. The last turn states the chain
    and answers. ``question`` may be a Question or, with ``world``, an id or question text.
    """
    if isinstance(question, str):
        if world is None:
            raise ValueError("oracle_trajectory needs the world to look up a question given as a string")
        question = world.question(question)
    turns: list[Turn] = []
    known: list[str] = []
    for i, step in enumerate(question.chain):
        lead = "I need to find" if i == 0 else "Now I need to find"
        thought = " ".join([*known, f"{lead} {step.need}."])
        turns.append(Turn(f"<think> {thought} </think>\n<search> {step.query} </search>", step.query))
        known.append(finding(step))
    answer = question.golden_answers[0]
    final = " ".join([*known, f"So the answer is {answer}."])
    turns.append(Turn(f"<think> {final} </think>\n<answer> {answer} </answer>"))
    return turns


def guess_trajectory(question: Question, guess: str, searches: int = 0) -> list[Turn]:
    """A shortcut trajectory: follow the oracle for ``searches`` steps, then answer ``guess``
    without searching on.

    Demonstrations like this stand in for a base model that does not reliably use its tool
    (it answers before it knows); mixed with oracle ones they give an SFT policy that searches
    only some of the time, which RL can then learn from reward to do always. The guess turn
    opens differently from a search turn ("I already know ..." against "I need to find ..."),
    so the choice is made at one point the policy can shift.
    """
    if not 0 <= searches < len(question.chain):
        raise ValueError(
            f"searches must be in [0, {len(question.chain) - 1}] for a {question.hop}-hop question"
        )
    turns = oracle_trajectory(question)[:searches]
    known = [finding(step) for step in question.chain[:searches]]
    final = " ".join([*known, f"I already know the answer: {guess}."])
    turns.append(Turn(f"<think> {final} </think>\n<answer> {guess} </answer>"))
    return turns


def oracle_text(turns: Sequence[Turn], observations: Sequence[str]) -> str:
    """Join turns with the observation text inserted after each search turn.

    ``observations[i]`` must be exactly what the environment inserts after search ``i``
    (e.g. ``"\\n\\n<information>…</information>\\n\\n"``), so SFT sees the same text as rollouts.
    """
    n_search = sum(t.query is not None for t in turns)
    if len(observations) != n_search:
        raise ValueError(f"{n_search} search turns but {len(observations)} observations")
    obs = iter(observations)
    return "".join(t.text + (next(obs) if t.query is not None else "") for t in turns)
