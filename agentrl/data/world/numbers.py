"""The world's opt-in numeric facts (founding and birth years) and the arithmetic questions built on them.

``generate_world(numbers=True)`` gives every company a founding year and every person a birth
year, each stated in one sentence of the entity's own passage, and adds arithmetic questions
that need both years (two searches) and one subtraction (``calculate``): "How many years after
A was founded was B founded?", "How many years older is P than Q?".

Everything here draws from its own ``random.Random`` (:func:`numbers_rng`), never from the
world's main generator, so the default world (``numbers=False``) is generated exactly as
before: same draws, same passages, same questions, same split.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from .questions import ChainStep

__all__ = [
    "ARITHMETIC_TEMPLATES",
    "ArithmeticFields",
    "add_years",
    "birth_year_sentences",
    "founding_year_sentences",
    "make_arithmetic_questions",
    "numbers_rng",
]

ARITHMETIC_TEMPLATES = ("founding_gap", "birth_gap")
FOUNDING_YEARS = (1800, 1990)
BIRTH_YEARS = (1930, 2000)

# (question, golden_answers, hop, template, subject, chain, calculation): QuestionFields plus the expression.
ArithmeticFields = tuple[str, list[str], int, str, str, list[ChainStep], str]
Entity = Mapping[str, str]


def numbers_rng(seed: int) -> random.Random:
    """The numeric facts' own generator (a str seed is hashed the same way in every process)."""
    return random.Random(f"agentrl-world-numbers-{seed}")


def add_years(rng: random.Random, companies: list[dict[str, str]], people: list[dict[str, str]]) -> None:
    """Give each company a ``founded_year`` and each person a ``birth_year`` (as text, like every field)."""
    for co in companies:
        co["founded_year"] = str(rng.randint(*FOUNDING_YEARS))
    for p in people:
        p["birth_year"] = str(rng.randint(*BIRTH_YEARS))


def founding_year_sentences(co: Entity) -> list[str]:
    """The passage sentence stating the company's founding year (none without one)."""
    return [f"{co['name']} was founded in the year {co['founded_year']}."] if "founded_year" in co else []


def birth_year_sentences(p: Entity) -> list[str]:
    """The passage sentence stating the person's birth year (none without one)."""
    return [f"{p['last']} was born in the year {p['birth_year']}."] if "birth_year" in p else []


def _founding_year_step(co: Entity) -> ChainStep:
    return ChainStep(
        f"the year {co['name']} was founded",
        f"{co['name']} founded year",
        co["passage_id"],
        co["founded_year"],
    )


def _birth_year_step(p: Entity) -> ChainStep:
    return ChainStep(
        f"the birth year of {p['name']}", f"{p['name']} born year", p["passage_id"], p["birth_year"]
    )


def _partner(rng: random.Random, entities: Sequence[Entity], i: int, key: str) -> int | None:
    """A random other entity whose ``key`` differs from entity ``i``'s (None when there is none)."""
    others = [j for j, e in enumerate(entities) if j != i and e[key] != entities[i][key]]
    return rng.choice(others) if others else None


def _gap_questions(
    rng: random.Random,
    entities: Sequence[Entity],
    key: str,
    text: str,
    template: str,
    step: Callable[[Entity], ChainStep],
) -> list[ArithmeticFields]:
    """One question per entity, paired with a random partner: the later year minus the earlier one."""
    rows: list[ArithmeticFields] = []
    seen: set[tuple[str, str]] = set()
    for i, entity in enumerate(entities):
        j = _partner(rng, entities, i, key)
        if j is None:
            continue
        early, late = sorted((entity, entities[j]), key=lambda e: int(e[key]))
        if (early["name"], late["name"]) in seen:
            continue
        seen.add((early["name"], late["name"]))
        chain = [step(early), step(late)]
        expression = f"{late[key]} - {early[key]}"
        answer = str(int(late[key]) - int(early[key]))
        question = text.format(early=early["name"], late=late["name"])
        rows.append((question, [answer], len(chain), template, early["name"], chain, expression))
    return rows


def make_arithmetic_questions(
    rng: random.Random, companies: Sequence[Entity], people: Sequence[Entity]
) -> list[ArithmeticFields]:
    """Every arithmetic question, in a fixed order for a given ``rng`` state (companies, then people).

    Each names two entities; its chain is the two year lookups (earlier year first) and its
    calculation the later year minus the earlier one, whose value is the gold answer.
    """
    founding = _gap_questions(
        rng,
        companies,
        "founded_year",
        "How many years after {early} was founded was {late} founded?",
        "founding_gap",
        _founding_year_step,
    )
    birth = _gap_questions(
        rng,
        people,
        "birth_year",
        "How many years older is {early} than {late}?",
        "birth_gap",
        _birth_year_step,
    )
    return founding + birth
