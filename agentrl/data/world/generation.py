"""Building the world: its entities and relations, their passages, the question split, and writing it out.

Every random draw comes from one ``random.Random(seed)`` in a fixed order (entities, then
passages, then distractors, then the question shuffle), so a seed fixes the world exactly.
The opt-in numeric facts and arithmetic questions (``numbers=True``, ``numbers.py``) draw
from a generator of their own, so the default world is the same with or without that code.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .names import (
    COUNTRY_ENDINGS,
    DISTRACTOR_KINDS,
    FEATURES,
    INDUSTRIES,
    LANGUAGE_ENDINGS,
    OCCUPATIONS,
    NameMaker,
)
from .numbers import (
    add_ages,
    company_age_sentences,
    make_arithmetic_questions,
    make_practice_arithmetic_questions,
    numbers_rng,
    person_age_sentences,
)
from .questions import Question, make_questions

__all__ = ["World", "generate_world", "write_world"]

Table = list[dict[str, str]]


@dataclass
class World:
    seed: int
    params: dict[str, Any]
    countries: list[dict[str, str]]
    cities: list[dict[str, str]]
    companies: list[dict[str, str]]
    people: list[dict[str, str]]
    passages: list[dict[str, str]]
    train_questions: list[Question]
    test_questions: list[Question]
    _by_id: dict[str, Question] = field(default_factory=dict, repr=False)

    def question(self, key: str) -> Question:
        """Look a question up by id or by exact question text."""
        if not self._by_id:
            for q in self.train_questions + self.test_questions:
                self._by_id[q.id] = q
                self._by_id[q.question] = q
        try:
            return self._by_id[key]
        except KeyError:
            raise KeyError(f"no question with id or text {key!r} in this world") from None


def _indefinite(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _add_passage(passages: Table, title: str, sentences: list[str]) -> str:
    """Append a wiki-style passage (quoted title line, then the text) and return its new id."""
    pid = f"world-{len(passages):05d}"
    passages.append({"id": pid, "contents": f'"{title}"\n' + " ".join(sentences)})
    return pid


def _check_sizes(sizes: dict[str, int], test_fraction: float) -> None:
    minimums = {
        "num_countries": 2,
        "num_people": 1,
        "num_companies": 1,
        "cities_per_country": 1,
        "num_distractors": 0,
    }
    for name, value in sizes.items():
        minimum = minimums[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")


def _make_places(
    rng: random.Random, names: NameMaker, num_countries: int, cities_per_country: int
) -> tuple[Table, Table]:
    """Countries, then each country's cities (the first one is its capital)."""
    countries: Table = []
    cities: Table = []
    for _ in range(num_countries):
        countries.append(
            {
                "name": names.make((2, 2), COUNTRY_ENDINGS),
                "currency": names.make((1, 2), lower=True),
                "language": names.make((1, 2), LANGUAGE_ENDINGS),
                "population": str(rng.randint(2, 90)),
            }
        )
    for c in countries:
        for j in range(cities_per_country):
            cities.append(
                {
                    "name": names.make((2, 2)),
                    "country": c["name"],
                    "capital": str(j == 0),
                    "feature": rng.choice(FEATURES),
                    "residents": str(rng.randint(20, 900)),
                }
            )
        c["capital"] = cities[-cities_per_country]["name"]
    return countries, cities


def _make_companies(
    rng: random.Random, names: NameMaker, num_companies: int, countries: Table, cities: Table
) -> Table:
    return [
        {
            "name": names.make((2, 2), ("", "x", "co", "tek")),
            "industry": rng.choice(INDUSTRIES),
            "headquarters": rng.choice(cities)["name"],
            "founded_in": rng.choice(countries)["name"],
            "employees": str(rng.randint(3, 400) * 100),
        }
        for _ in range(num_companies)
    ]


def _make_people(
    rng: random.Random, names: NameMaker, num_people: int, cities: Table, companies: Table
) -> Table:
    people: Table = []
    for _ in range(num_people):
        first, last = names.make((1, 2)), names.make((2, 2))
        people.append(
            {
                "name": f"{first} {last}",
                "last": last,
                "occupation": rng.choice(OCCUPATIONS),
                "birthplace": rng.choice(cities)["name"],
                "employer": rng.choice(companies)["name"],
            }
        )
    return people


def _add_place_passages(passages: Table, countries: Table, cities: Table) -> None:
    for c in countries:
        c["passage_id"] = _add_passage(
            passages,
            c["name"],
            [
                f"{c['name']} is a country with about {c['population']} million inhabitants.",
                f"The currency used in {c['name']} is the {c['currency']}.",
                f"The official language of the country is {c['language']}.",
            ],
        )
    for city in cities:
        if city["capital"] == "True":
            facts = [
                f"{city['name']} is the capital of {city['country']}.",
                f"As the capital city, {city['name']} is the seat of the government.",
            ]
        else:
            facts = [f"{city['name']} is a city in {city['country']}."]
        city["passage_id"] = _add_passage(
            passages,
            city["name"],
            [
                *facts,
                f"{city['name']} is known for {city['feature']}.",
                f"About {city['residents']} thousand people live there.",
            ],
        )


def _add_company_and_person_passages(
    rng: random.Random, passages: Table, companies: Table, people: Table
) -> None:
    for co in companies:
        co["passage_id"] = _add_passage(
            passages,
            co["name"],
            [
                f"{co['name']} is {_indefinite(co['industry'])} company founded in {co['founded_in']}.",
                *company_age_sentences(co),
                f"The headquarters of {co['name']} are in {co['headquarters']}.",
                f"It employs about {co['employees']} people.",
            ],
        )
    for p in people:
        p["passage_id"] = _add_passage(
            passages,
            p["name"],
            [
                f"{p['name']} is {_indefinite(p['occupation'])}.",
                f"{p['last']} was born in {p['birthplace']}.",
                *person_age_sentences(p),
                f"The employer of {p['name']} is {p['employer']}, "
                f"where {p['last']} has worked for {rng.randint(2, 30)} years.",
            ],
        )


def _add_distractors(
    rng: random.Random, names: NameMaker, passages: Table, num_distractors: int, tables: dict[str, Table]
) -> None:
    """Passages about invented events that mention entities but state none of their relations."""
    for _ in range(num_distractors):
        kind = rng.choice(DISTRACTOR_KINDS)
        title = f"{names.make((2, 2))} {kind}"
        c1, c2 = rng.sample(tables["countries"], 2)
        city = rng.choice(tables["cities"])
        person = rng.choice(tables["people"])
        co = rng.choice(tables["companies"])
        _add_passage(
            passages,
            title,
            [
                f"The {title} brought together visitors from {c1['name']} and {c2['name']}.",
                f"One event took place in {city['name']}, and {person['name']} gave a speech there.",
                f"It was sponsored by {co['name']}.",
            ],
        )


def _add_arithmetic(
    rng: random.Random,
    companies: Table,
    people: Table,
    test_fraction: float,
    train: list[Question],
    test: list[Question],
    practice_rounds: int = 0,
) -> None:
    """Append the arithmetic questions, split like the others, after the one- and two-hop ones
    (whose ids and split stay those of the world without numbers); then, with ``practice_rounds``,
    that many more per entity to the training split only, none naming an entity of a held-out
    arithmetic question (``make_practice_arithmetic_questions``)."""
    rows = make_arithmetic_questions(rng, companies, people)
    rng.shuffle(rows)
    n_test = max(1, round(len(rows) * test_fraction)) if rows else 0
    if practice_rounds:
        name_of = {e["passage_id"]: e["name"] for e in [*companies, *people]}
        pairs = [tuple(name_of[step.passage_id] for step in row[5]) for row in rows]
        held_out = {name for pair in pairs[:n_test] for name in pair}
        rows += make_practice_arithmetic_questions(
            rng, companies, people, practice_rounds, set(pairs), held_out
        )
    first_test, first_train = len(test), len(train)
    test += [Question(f"test_{first_test + i}", *q) for i, q in enumerate(rows[:n_test])]
    train += [Question(f"train_{first_train + i}", *q) for i, q in enumerate(rows[n_test:])]


def generate_world(
    seed: int = 0,
    num_countries: int = 24,
    num_people: int = 120,
    num_companies: int = 40,
    cities_per_country: int = 3,
    num_distractors: int = 80,
    test_fraction: float = 0.2,
    numbers: bool = False,
    arithmetic_practice: int = 0,
) -> World:
    """Build a world deterministically from ``seed`` (same arguments -> identical world).

    Sizes are validated because a silently empty split would make training "work" on nothing.
    ``numbers`` adds company and person ages to the company and person passages and
    arithmetic questions on them (:func:`_add_arithmetic`); off, nothing of it is drawn.
    ``arithmetic_practice`` (with ``numbers``) adds that many training-only arithmetic questions
    per entity on top, on entities no held-out one names; 0 leaves the numbers world as it was.
    """
    if arithmetic_practice and not numbers:
        raise ValueError("generate_world: arithmetic_practice needs numbers=True (it adds arithmetic ones)")
    if arithmetic_practice < 0:
        raise ValueError(f"generate_world: arithmetic_practice must be >= 0, got {arithmetic_practice}")
    sizes = {
        "num_countries": num_countries,
        "num_people": num_people,
        "num_companies": num_companies,
        "cities_per_country": cities_per_country,
        "num_distractors": num_distractors,
    }
    _check_sizes(sizes, test_fraction)
    rng = random.Random(seed)
    names = NameMaker(rng)
    countries, cities = _make_places(rng, names, num_countries, cities_per_country)
    companies = _make_companies(rng, names, num_companies, countries, cities)
    people = _make_people(rng, names, num_people, cities, companies)
    nrng = numbers_rng(seed) if numbers else None
    if nrng is not None:
        add_ages(nrng, companies, people)
    passages: Table = []
    _add_place_passages(passages, countries, cities)
    _add_company_and_person_passages(rng, passages, companies, people)
    tables = {"countries": countries, "cities": cities, "companies": companies, "people": people}
    _add_distractors(rng, names, passages, num_distractors, tables)

    questions = make_questions(
        countries, cities, companies, people, {p["id"]: p["contents"] for p in passages}
    )
    rng.shuffle(questions)
    n_test = max(1, round(len(questions) * test_fraction))
    test_raw, train_raw = questions[:n_test], questions[n_test:]
    train = [Question(f"train_{i}", *q) for i, q in enumerate(train_raw)]
    test = [Question(f"test_{i}", *q) for i, q in enumerate(test_raw)]
    params = {"seed": seed, **sizes, "test_fraction": test_fraction}
    if nrng is not None:
        _add_arithmetic(nrng, companies, people, test_fraction, train, test, arithmetic_practice)
        params["numbers"] = True
        if arithmetic_practice:
            params["arithmetic_practice"] = arithmetic_practice
    return World(seed, params, countries, cities, companies, people, passages, train, test)


def write_world(world: World, out_dir: str | Path) -> dict[str, Path]:
    """Write ``corpus.jsonl``, ``train.jsonl``, ``test.jsonl`` and ``world.json`` (entity tables).

    Output is byte-for-byte reproducible for a given world (fixed key order, no timestamps).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / f"{name}.jsonl" for name in ("corpus", "train", "test")}

    def dump(path: Path, rows: list[dict[str, Any]]) -> None:
        with path.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")

    dump(paths["corpus"], world.passages)
    dump(paths["train"], [q.to_json() for q in world.train_questions])
    dump(paths["test"], [q.to_json() for q in world.test_questions])
    paths["world"] = out / "world.json"
    meta = {
        "params": world.params,
        "countries": world.countries,
        "cities": world.cities,
        "companies": world.companies,
        "people": world.people,
    }
    paths["world"].write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return paths
