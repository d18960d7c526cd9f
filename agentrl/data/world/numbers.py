"""The world's opt-in numeric facts (company and person ages) and the arithmetic questions built on them.

``generate_world(numbers=True)`` gives every company an age ("Shamquex was founded 47 years
ago.") and every person an age ("Rildam is 53 years old."), each stated in one sentence of the
entity's own passage, and adds arithmetic questions that need both ages (two searches) and one
subtraction (``calculate``): "How many years after A was founded was B founded?", "How many
years older is P than Q?".

Ages have two digits, not four as years would: a Qwen2-style tokenizer (the tiny one too)
gives every digit its own token, and a 2-layer policy copies two digits out of a passage far
more reliably than four (with years its warm start read 0 of 32 held-out pairs right).

Everything here draws from its own ``random.Random`` (:func:`numbers_rng`), never from the
world's main generator, so the default world (``numbers=False``) is generated exactly as
before: same draws, same passages, same questions, same split.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence, Set

from .questions import ChainStep

__all__ = [
    "ARITHMETIC_TEMPLATES",
    "ArithmeticFields",
    "add_ages",
    "age_statement",
    "company_age_sentences",
    "make_arithmetic_questions",
    "make_practice_arithmetic_questions",
    "numbers_rng",
    "person_age_sentences",
]

ARITHMETIC_TEMPLATES = ("founding_gap", "birth_gap")
COMPANY_AGES = (10, 99)  # years since the company was founded
PERSON_AGES = (20, 89)

# (question, golden_answers, hop, template, subject, chain, calculation): QuestionFields plus the expression.
ArithmeticFields = tuple[str, list[str], int, str, str, list[ChainStep], str]
Entity = Mapping[str, str]


def numbers_rng(seed: int) -> random.Random:
    """The numeric facts' own generator (a str seed is hashed the same way in every process)."""
    return random.Random(f"agentrl-world-numbers-{seed}")


def add_ages(rng: random.Random, companies: list[dict[str, str]], people: list[dict[str, str]]) -> None:
    """Give each company a ``founded_years_ago`` and each person an ``age`` (as text, like every field)."""
    for co in companies:
        co["founded_years_ago"] = str(rng.randint(*COMPANY_AGES))
    for p in people:
        p["age"] = str(rng.randint(*PERSON_AGES))


def company_age_sentences(co: Entity) -> list[str]:
    """The passage sentence stating how long ago the company was founded (none without it)."""
    if "founded_years_ago" not in co:
        return []
    return [f"{co['name']} was founded {co['founded_years_ago']} years ago."]


def person_age_sentences(p: Entity) -> list[str]:
    """The passage sentence stating the person's age (none without one)."""
    return [f"{p['last']} is {p['age']} years old."] if "age" in p else []


_PERSON_NEED = "the age of "  # + the person's full name (_person_age_step)
_COMPANY_NEED = ("how many years ago ", " was founded")  # around the company's name (_company_age_step)


def age_statement(step: ChainStep) -> str | None:
    """The passage's own sentence for an age step, with its answer: "Rildam is 53 years old."
    (a person's passage names them by their last name), "Shamquex was founded 47 years ago.";
    None for a step that reads no age. Restated by a demonstration, the age follows the same
    words it follows in the passage, so reading it back is a copy of what came after them."""
    if step.need.startswith(_PERSON_NEED):
        last = step.need[len(_PERSON_NEED) :].split()[-1]
        return person_age_sentences({"last": last, "age": step.answer})[0]
    opening, closing = _COMPANY_NEED
    if step.need.startswith(opening) and step.need.endswith(closing):
        name = step.need[len(opening) : -len(closing)]
        return company_age_sentences({"name": name, "founded_years_ago": step.answer})[0]
    return None


def _company_age_step(co: Entity) -> ChainStep:
    return ChainStep(
        f"{_COMPANY_NEED[0]}{co['name']}{_COMPANY_NEED[1]}",
        f"{co['name']} founded years ago",
        co["passage_id"],
        co["founded_years_ago"],
    )


def _person_age_step(p: Entity) -> ChainStep:
    return ChainStep(f"{_PERSON_NEED}{p['name']}", f"{p['name']} age", p["passage_id"], p["age"])


def _partner(
    rng: random.Random, entities: Sequence[Entity], i: int, key: str, skip: Set[str] = frozenset()
) -> int | None:
    """A random other entity whose ``key`` differs from entity ``i``'s and whose name is not in
    ``skip`` (None when there is none)."""
    others = [
        j for j, e in enumerate(entities) if j != i and e[key] != entities[i][key] and e["name"] not in skip
    ]
    return rng.choice(others) if others else None


def _gap_questions(
    rng: random.Random,
    entities: Sequence[Entity],
    key: str,
    text: str,
    template: str,
    step: Callable[[Entity], ChainStep],
    seen: set[tuple[str, str]] | None = None,
    skip: Set[str] = frozenset(),
) -> list[ArithmeticFields]:
    """One question per entity, paired with a random partner: the older one's age minus the younger one's.

    ``seen`` holds the (older, younger) name pairs already asked (none is asked twice; it grows);
    entities named in ``skip`` take part in no question."""
    rows: list[ArithmeticFields] = []
    seen = set() if seen is None else seen
    for i, entity in enumerate(entities):
        if entity["name"] in skip:
            continue
        j = _partner(rng, entities, i, key, skip)
        if j is None:
            continue
        early, late = sorted((entity, entities[j]), key=lambda e: -int(e[key]))  # the older first
        if (early["name"], late["name"]) in seen:
            continue
        seen.add((early["name"], late["name"]))
        chain = [step(early), step(late)]
        expression = f"{early[key]} - {late[key]}"
        answer = str(int(early[key]) - int(late[key]))
        question = text.format(early=early["name"], late=late["name"])
        rows.append((question, [answer], len(chain), template, early["name"], chain, expression))
    return rows


def _gap_kinds(
    companies: Sequence[Entity], people: Sequence[Entity]
) -> list[tuple[Sequence[Entity], str, str, str, Callable[[Entity], ChainStep]]]:
    """The two kinds of arithmetic question, companies first: (entities, age key, text, template, step)."""
    return [
        (
            companies,
            "founded_years_ago",
            "How many years after {early} was founded was {late} founded?",
            "founding_gap",
            _company_age_step,
        ),
        (people, "age", "How many years older is {early} than {late}?", "birth_gap", _person_age_step),
    ]


def make_arithmetic_questions(
    rng: random.Random, companies: Sequence[Entity], people: Sequence[Entity]
) -> list[ArithmeticFields]:
    """Every arithmetic question, in a fixed order for a given ``rng`` state (companies, then people).

    Each names two entities; its chain is the two age lookups (the older entity first) and its
    calculation the older one's age minus the younger one's, whose value is the gold answer.
    """
    rows: list[ArithmeticFields] = []
    for entities, key, text, template, step in _gap_kinds(companies, people):
        rows += _gap_questions(rng, entities, key, text, template, step)
    return rows


def make_practice_arithmetic_questions(
    rng: random.Random,
    companies: Sequence[Entity],
    people: Sequence[Entity],
    rounds: int,
    asked: Set[tuple[str, str]],
    held_out: Set[str],
) -> list[ArithmeticFields]:
    """``rounds`` more arithmetic questions per entity, for training only: new random partners, no
    pair of ``asked`` (the (older, younger) names already asked) asked again, and no entity of
    ``held_out`` (the names in the held-out arithmetic questions) in any of them, so no held-out
    question's age is ever read in a demonstration or a training rollout."""
    rows: list[ArithmeticFields] = []
    seen = set(asked)
    for _ in range(rounds):
        for entities, key, text, template, step in _gap_kinds(companies, people):
            rows += _gap_questions(rng, entities, key, text, template, step, seen, held_out)
    return rows
