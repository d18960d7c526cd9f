"""The world's questions: one- and two-hop question records and their construction from the entities.

Each question carries its ideal solution as a chain of retrieval steps (:class:`ChainStep`),
one per hop, each naming the passage that holds the fact and a search query for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["DATASET_NAME", "ChainStep", "Question", "QuestionFields", "make_questions"]

DATASET_NAME = "synthetic_world"


@dataclass(frozen=True)
class ChainStep:
    """One retrieval of the ideal solution: what to look for, the query, and what it yields."""

    need: str
    query: str
    passage_id: str
    answer: str


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    golden_answers: list[str]
    hop: int
    template: str
    subject: str  # the entity the question names
    chain: list[ChainStep]
    # an arithmetic question's last step (``generate_world(numbers=True)``): the expression that
    # turns the chain's answers into the gold answer, e.g. "1987 - 1923"; None for the others
    calculation: str | None = None

    @property
    def kind(self) -> str:
        """``arithmetic`` for a question with a calculation, else ``1hop`` / ``2hop``."""
        return "arithmetic" if self.calculation is not None else f"{self.hop}hop"

    @property
    def search_queries(self) -> list[str]:
        return [s.query for s in self.chain]

    @property
    def gold_passage_ids(self) -> list[str]:
        return [s.passage_id for s in self.chain]

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Question:
        """Rebuild a Question from its :meth:`to_json` record (e.g. a line of train.jsonl)."""
        try:
            return cls(
                id=record["id"],
                question=record["question"],
                golden_answers=list(record["golden_answers"]),
                hop=int(record["hop"]),
                template=record["template"],
                subject=record["subject"],
                chain=[ChainStep(**step) for step in record["answer_chain"]],
                calculation=record.get("calculation"),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(
                f"not a synthetic_world question record (id {record.get('id')!r}): {exc}"
            ) from None

    def to_json(self) -> dict[str, Any]:
        """The QA jsonl record, same core fields as the real datasets plus oracle extras
        (``calculation`` only for an arithmetic question, so the others' records are as they were)."""
        record = {
            "id": self.id,
            "question": self.question,
            "golden_answers": list(self.golden_answers),
            "dataset": DATASET_NAME,
            "hop": self.hop,
            "template": self.template,
            "subject": self.subject,
            "search_queries": self.search_queries,
            "gold_passage_ids": self.gold_passage_ids,
            "answer_chain": [asdict(s) for s in self.chain],
        }
        if self.calculation is not None:
            record["calculation"] = self.calculation
        return record


# A question without its id: (question, golden_answers, hop, template, subject, chain).
QuestionFields = tuple[str, list[str], int, str, str, list[ChainStep]]
Entity = Mapping[str, str]


def _capital_step(c: Entity, city_of: Mapping[str, Entity]) -> ChainStep:
    cap = city_of[c["capital"]]
    return ChainStep(f"the capital of {c['name']}", f"capital of {c['name']}", cap["passage_id"], cap["name"])


def _country_of_capital(cap: Entity) -> ChainStep:
    return ChainStep(
        f"the country whose capital is {cap['name']}",
        f"{cap['name']} capital",
        cap["passage_id"],
        cap["country"],
    )


def _currency_step(c: Entity) -> ChainStep:
    return ChainStep(f"the currency of {c['name']}", f"{c['name']} currency", c["passage_id"], c["currency"])


def _language_step(c: Entity) -> ChainStep:
    return ChainStep(f"the language of {c['name']}", f"{c['name']} language", c["passage_id"], c["language"])


def _city_country_step(ci: Entity) -> ChainStep:
    return ChainStep(f"the country of {ci['name']}", f"{ci['name']} city", ci["passage_id"], ci["country"])


def _hq_step(co: Entity) -> ChainStep:
    return ChainStep(
        f"the headquarters city of {co['name']}",
        f"{co['name']} headquarters",
        co["passage_id"],
        co["headquarters"],
    )


def _founded_step(co: Entity) -> ChainStep:
    return ChainStep(
        f"the founding country of {co['name']}",
        f"{co['name']} company founded",
        co["passage_id"],
        co["founded_in"],
    )


def _born_step(p: Entity) -> ChainStep:
    return ChainStep(f"the birthplace of {p['name']}", f"{p['name']} born", p["passage_id"], p["birthplace"])


def _employer_step(p: Entity) -> ChainStep:
    return ChainStep(f"the employer of {p['name']}", f"{p['name']} employer", p["passage_id"], p["employer"])


class _QuestionList:
    """The questions collected so far, in order, minus two-hop ones that one passage answers."""

    def __init__(self, passage_text: Mapping[str, str]) -> None:
        self.passage_text = passage_text
        self.rows: list[QuestionFields] = []

    def add(self, text: str, template: str, subject: Entity, chain: list[ChainStep]) -> None:
        if len(chain) > 1 and chain[-1].answer in self.passage_text[chain[0].passage_id]:
            # e.g. someone born in the city where their employer sits: the first passage
            # would already show the answer, so the question would not need two hops
            return
        self.rows.append((text, [chain[-1].answer], len(chain), template, subject["name"], chain))


def _add_country_questions(
    out: _QuestionList, countries: list[dict[str, str]], city_of: Mapping[str, Entity]
) -> None:
    for c in countries:
        out.add(f"What is the capital of {c['name']}?", "capital", c, [_capital_step(c, city_of)])
        out.add(f"What currency is used in {c['name']}?", "currency", c, [_currency_step(c)])
        out.add(f"What language is spoken in {c['name']}?", "language", c, [_language_step(c)])
        cap = city_of[c["capital"]]
        out.add(
            f"What currency is used in the country whose capital is {cap['name']}?",
            "currency_by_capital",
            cap,
            [_country_of_capital(cap), _currency_step(c)],
        )
        out.add(
            f"What language is spoken in the country whose capital is {cap['name']}?",
            "language_by_capital",
            cap,
            [_country_of_capital(cap), _language_step(c)],
        )


def _add_city_questions(out: _QuestionList, cities: list[dict[str, str]]) -> None:
    for ci in cities:
        out.add(f"In which country is {ci['name']} located?", "city_country", ci, [_city_country_step(ci)])


def _add_company_questions(
    out: _QuestionList,
    companies: list[dict[str, str]],
    country: Mapping[str, Entity],
    city_of: Mapping[str, Entity],
) -> None:
    for co in companies:
        out.add(f"In which city is {co['name']} headquartered?", "headquarters", co, [_hq_step(co)])
        out.add(f"In which country was {co['name']} founded?", "founded", co, [_founded_step(co)])
        out.add(
            f"What is the capital of the country where {co['name']} was founded?",
            "capital_of_founding_country",
            co,
            [_founded_step(co), _capital_step(country[co["founded_in"]], city_of)],
        )


def _add_person_questions(
    out: _QuestionList,
    people: list[dict[str, str]],
    company: Mapping[str, Entity],
    city_of: Mapping[str, Entity],
) -> None:
    for p in people:
        emp = company[p["employer"]]
        out.add(f"Where was {p['name']} born?", "birthplace", p, [_born_step(p)])
        out.add(f"Which company does {p['name']} work for?", "employer", p, [_employer_step(p)])
        out.add(
            f"In which country was {p['name']} born?",
            "birth_country",
            p,
            [_born_step(p), _city_country_step(city_of[p["birthplace"]])],
        )
        out.add(
            f"In which city is the employer of {p['name']} headquartered?",
            "employer_headquarters",
            p,
            [_employer_step(p), _hq_step(emp)],
        )
        out.add(
            f"In which country was the employer of {p['name']} founded?",
            "employer_founded",
            p,
            [_employer_step(p), _founded_step(emp)],
        )


def make_questions(
    countries: list[dict[str, str]],
    cities: list[dict[str, str]],
    companies: list[dict[str, str]],
    people: list[dict[str, str]],
    passage_text: Mapping[str, str],
) -> list[QuestionFields]:
    """Every (template, subject) question of the world, in a fixed order.

    Two-hop questions whose first passage already contains the answer are left out.
    """
    country = {c["name"]: c for c in countries}
    city_of = {c["name"]: c for c in cities}
    company = {c["name"]: c for c in companies}
    out = _QuestionList(passage_text)
    _add_country_questions(out, countries, city_of)
    _add_city_questions(out, cities)
    _add_company_questions(out, companies, country, city_of)
    _add_person_questions(out, people, company, city_of)
    seen: set[str] = set()
    for text, *_ in out.rows:
        if text in seen:  # names are unique, so this would be a generator bug
            raise AssertionError(f"duplicate question generated: {text!r}")
        seen.add(text)
    return out.rows
