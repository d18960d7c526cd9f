"""A seeded, invented knowledge base for teaching a tiny policy to search.

Every fact is made up (pronounceable invented names), so a model cannot answer from
memory: it has to issue a search, read the returned passage and copy the answer. Each
relation fact is stated in exactly one passage (the subject's own article), which is what
makes two-hop questions genuinely need two retrievals. The oracle trajectories (for an SFT
warm start) use search queries checked against BM25 over the generated corpus.

The world, in relations::

    city    --in-->        country   (one city per country is its capital)
    country --currency-->  word,  --language--> word
    company --headquartered in--> city,  --founded in--> country
    person  --born in-->   city,   --works for--> company
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DATASET_NAME",
    "ChainStep",
    "Question",
    "Turn",
    "World",
    "generate_world",
    "guess_trajectory",
    "oracle_hit_rate",
    "oracle_text",
    "oracle_trajectory",
    "write_world",
]

DATASET_NAME = "synthetic_world"

_ONSETS = [
    "b",
    "d",
    "f",
    "g",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "t",
    "v",
    "z",
    "br",
    "dr",
    "gr",
    "kr",
    "tr",
    "th",
    "sh",
    "qu",
    "st",
    "pl",
    "fl",
]
_VOWELS = ["a", "e", "i", "o", "u", "a", "o", "ai", "ei"]
_CODAS = ["", "", "", "n", "r", "l", "m", "x"]
_COUNTRY_ENDINGS = ["ia", "ar", "en", "or", "ova", "istan", "ir"]
_LANGUAGE_ENDINGS = ["ic", "ish", "ese", "an"]
_INDUSTRIES = [
    "shipbuilding",
    "textile",
    "software",
    "mining",
    "pharmaceutical",
    "publishing",
    "aerospace",
    "farming",
    "brewing",
    "glassmaking",
]
_OCCUPATIONS = [
    "engineer",
    "painter",
    "chemist",
    "architect",
    "journalist",
    "composer",
    "surgeon",
    "economist",
    "pilot",
    "historian",
]
_FEATURES = [
    "its old harbour",
    "a large stone bridge",
    "its spring market",
    "a famous observatory",
    "its clock tower",
    "wide canals",
    "a hillside monastery",
    "its botanical garden",
]
_DISTRACTOR_KINDS = ["Festival", "Accord", "Prize", "Expedition", "Games"]


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
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(
                f"not a synthetic_world question record (id {record.get('id')!r}): {exc}"
            ) from None

    def to_json(self) -> dict[str, Any]:
        """The QA jsonl record, same core fields as the real datasets plus oracle extras."""
        return {
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


@dataclass(frozen=True)
class Turn:
    """A model segment of an oracle trajectory.

    ``text`` is what the model writes; when ``query`` is set, ``text`` ends with
    ``<search> query </search>`` and the environment inserts the retrieved documents next.
    The last turn has ``query=None`` and ends with the ``<answer>``.
    """

    text: str
    query: str | None = None


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


class _NameMaker:
    """Unique invented names; uniqueness is checked on the lowercased, stemmed form so BM25
    (which stems) can never confuse two entities."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()
        try:
            import Stemmer

            self._stem = Stemmer.Stemmer("english").stemWord
        except ImportError:  # pragma: no cover - PyStemmer is a core dependency
            self._stem = lambda w: w

    def _syllable(self) -> str:
        r = self.rng
        return r.choice(_ONSETS) + r.choice(_VOWELS) + r.choice(_CODAS)

    def make(
        self, syllables: tuple[int, int] = (2, 2), ending: Sequence[str] = ("",), lower: bool = False
    ) -> str:
        for _ in range(10_000):
            n = self.rng.randint(*syllables)
            stem, end = "".join(self._syllable() for _ in range(n)), self.rng.choice(list(ending))
            if end and stem[-1] == end[0]:  # no "Texvuxx"
                continue
            word = stem + end
            key = self._stem(word.lower())
            if len(word) < 4 or word[-1] == "s" or key in self.used or word.lower() in self.used:
                continue
            self.used.update((key, word.lower()))
            return word.lower() if lower else word.capitalize()
        raise RuntimeError("name space exhausted; lower the world size")


def _indefinite(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _passage(pid: str, title: str, sentences: list[str]) -> dict[str, str]:
    return {"id": pid, "contents": f'"{title}"\n' + " ".join(sentences)}


def generate_world(
    seed: int = 0,
    num_countries: int = 24,
    num_people: int = 120,
    num_companies: int = 40,
    cities_per_country: int = 3,
    num_distractors: int = 80,
    test_fraction: float = 0.2,
) -> World:
    """Build a world deterministically from ``seed`` (same arguments -> identical world).

    Sizes are validated because a silently empty split would make training "work" on nothing.
    """
    for name, value, minimum in [
        ("num_countries", num_countries, 2),
        ("num_people", num_people, 1),
        ("num_companies", num_companies, 1),
        ("cities_per_country", cities_per_country, 1),
        ("num_distractors", num_distractors, 0),
    ]:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    rng = random.Random(seed)
    names = _NameMaker(rng)
    passages: list[dict[str, str]] = []

    def new_pid() -> str:
        return f"world-{len(passages):05d}"

    countries, cities, companies, people = [], [], [], []
    for _ in range(num_countries):
        countries.append(
            {
                "name": names.make((2, 2), _COUNTRY_ENDINGS),
                "currency": names.make((1, 2), lower=True),
                "language": names.make((1, 2), _LANGUAGE_ENDINGS),
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
                    "feature": rng.choice(_FEATURES),
                    "residents": str(rng.randint(20, 900)),
                }
            )
        c["capital"] = cities[-cities_per_country]["name"]
    for _ in range(num_companies):
        companies.append(
            {
                "name": names.make((2, 2), ("", "x", "co", "tek")),
                "industry": rng.choice(_INDUSTRIES),
                "headquarters": rng.choice(cities)["name"],
                "founded_in": rng.choice(countries)["name"],
                "employees": str(rng.randint(3, 400) * 100),
            }
        )
    for _ in range(num_people):
        first, last = names.make((1, 2)), names.make((2, 2))
        people.append(
            {
                "name": f"{first} {last}",
                "last": last,
                "occupation": rng.choice(_OCCUPATIONS),
                "birthplace": rng.choice(cities)["name"],
                "employer": rng.choice(companies)["name"],
            }
        )

    for c in countries:
        c["passage_id"] = new_pid()
        passages.append(
            _passage(
                c["passage_id"],
                c["name"],
                [
                    f"{c['name']} is a country with about {c['population']} million inhabitants.",
                    f"The currency used in {c['name']} is the {c['currency']}.",
                    f"The official language of the country is {c['language']}.",
                ],
            )
        )
    for city in cities:
        city["passage_id"] = new_pid()
        if city["capital"] == "True":
            facts = [
                f"{city['name']} is the capital of {city['country']}.",
                f"As the capital city, {city['name']} is the seat of the government.",
            ]
        else:
            facts = [f"{city['name']} is a city in {city['country']}."]
        passages.append(
            _passage(
                city["passage_id"],
                city["name"],
                [
                    *facts,
                    f"{city['name']} is known for {city['feature']}.",
                    f"About {city['residents']} thousand people live there.",
                ],
            )
        )
    for co in companies:
        co["passage_id"] = new_pid()
        passages.append(
            _passage(
                co["passage_id"],
                co["name"],
                [
                    f"{co['name']} is {_indefinite(co['industry'])} company founded in {co['founded_in']}.",
                    f"The headquarters of {co['name']} are in {co['headquarters']}.",
                    f"It employs about {co['employees']} people.",
                ],
            )
        )
    for p in people:
        p["passage_id"] = new_pid()
        passages.append(
            _passage(
                p["passage_id"],
                p["name"],
                [
                    f"{p['name']} is {_indefinite(p['occupation'])}.",
                    f"{p['last']} was born in {p['birthplace']}.",
                    f"The employer of {p['name']} is {p['employer']}, where {p['last']} has worked for {rng.randint(2, 30)} years.",
                ],
            )
        )
    for _ in range(num_distractors):
        kind = rng.choice(_DISTRACTOR_KINDS)
        title = f"{names.make((2, 2))} {kind}"
        c1, c2 = rng.sample(countries, 2)
        city = rng.choice(cities)
        person = rng.choice(people)
        co = rng.choice(companies)
        passages.append(
            _passage(
                new_pid(),
                title,
                [
                    f"The {title} brought together visitors from {c1['name']} and {c2['name']}.",
                    f"One event took place in {city['name']}, and {person['name']} gave a speech there.",
                    f"It was sponsored by {co['name']}.",
                ],
            )
        )

    questions = _make_questions(
        countries, cities, companies, people, {p["id"]: p["contents"] for p in passages}
    )
    rng.shuffle(questions)
    n_test = max(1, round(len(questions) * test_fraction))
    test_raw, train_raw = questions[:n_test], questions[n_test:]
    train = [Question(f"train_{i}", *q) for i, q in enumerate(train_raw)]
    test = [Question(f"test_{i}", *q) for i, q in enumerate(test_raw)]
    params = {
        "seed": seed,
        "num_countries": num_countries,
        "num_people": num_people,
        "num_companies": num_companies,
        "cities_per_country": cities_per_country,
        "num_distractors": num_distractors,
        "test_fraction": test_fraction,
    }
    return World(seed, params, countries, cities, companies, people, passages, train, test)


def _make_questions(
    countries: list[dict[str, str]],
    cities: list[dict[str, str]],
    companies: list[dict[str, str]],
    people: list[dict[str, str]],
    passage_text: Mapping[str, str],
) -> list[tuple[str, list[str], int, str, str, list[ChainStep]]]:
    """Every (template, subject) question of the world, in a fixed order.

    Two-hop questions whose first passage already contains the answer are left out.
    """
    country = {c["name"]: c for c in countries}
    city_of = {c["name"]: c for c in cities}
    company = {c["name"]: c for c in companies}

    def capital_step(c: Mapping[str, str]) -> ChainStep:
        cap = city_of[c["capital"]]
        return ChainStep(
            f"the capital of {c['name']}", f"capital of {c['name']}", cap["passage_id"], cap["name"]
        )

    def country_of_capital(cap: Mapping[str, str]) -> ChainStep:
        return ChainStep(
            f"the country whose capital is {cap['name']}",
            f"{cap['name']} capital",
            cap["passage_id"],
            cap["country"],
        )

    def currency_step(c: Mapping[str, str]) -> ChainStep:
        return ChainStep(
            f"the currency of {c['name']}", f"{c['name']} currency", c["passage_id"], c["currency"]
        )

    def language_step(c: Mapping[str, str]) -> ChainStep:
        return ChainStep(
            f"the language of {c['name']}", f"{c['name']} language", c["passage_id"], c["language"]
        )

    def city_country_step(ci: Mapping[str, str]) -> ChainStep:
        return ChainStep(
            f"the country of {ci['name']}", f"{ci['name']} city", ci["passage_id"], ci["country"]
        )

    def hq_step(co: Mapping[str, str]) -> ChainStep:
        return ChainStep(
            f"the headquarters city of {co['name']}",
            f"{co['name']} headquarters",
            co["passage_id"],
            co["headquarters"],
        )

    def founded_step(co: Mapping[str, str]) -> ChainStep:
        return ChainStep(
            f"the founding country of {co['name']}",
            f"{co['name']} company founded",
            co["passage_id"],
            co["founded_in"],
        )

    def born_step(p: Mapping[str, str]) -> ChainStep:
        return ChainStep(
            f"the birthplace of {p['name']}", f"{p['name']} born", p["passage_id"], p["birthplace"]
        )

    def employer_step(p: Mapping[str, str]) -> ChainStep:
        return ChainStep(
            f"the employer of {p['name']}", f"{p['name']} employer", p["passage_id"], p["employer"]
        )

    out: list[tuple[str, list[str], int, str, str, list[ChainStep]]] = []

    def add(text: str, template: str, subject: Mapping[str, str], chain: list[ChainStep]) -> None:
        if len(chain) > 1 and chain[-1].answer in passage_text[chain[0].passage_id]:
            # e.g. someone born in the city where their employer sits: the first passage
            # would already show the answer, so the question would not need two hops
            return
        out.append((text, [chain[-1].answer], len(chain), template, subject["name"], chain))

    for c in countries:
        add(f"What is the capital of {c['name']}?", "capital", c, [capital_step(c)])
        add(f"What currency is used in {c['name']}?", "currency", c, [currency_step(c)])
        add(f"What language is spoken in {c['name']}?", "language", c, [language_step(c)])
        cap = city_of[c["capital"]]
        add(
            f"What currency is used in the country whose capital is {cap['name']}?",
            "currency_by_capital",
            cap,
            [country_of_capital(cap), currency_step(c)],
        )
        add(
            f"What language is spoken in the country whose capital is {cap['name']}?",
            "language_by_capital",
            cap,
            [country_of_capital(cap), language_step(c)],
        )
    for ci in cities:
        add(f"In which country is {ci['name']} located?", "city_country", ci, [city_country_step(ci)])
    for co in companies:
        add(f"In which city is {co['name']} headquartered?", "headquarters", co, [hq_step(co)])
        add(f"In which country was {co['name']} founded?", "founded", co, [founded_step(co)])
        add(
            f"What is the capital of the country where {co['name']} was founded?",
            "capital_of_founding_country",
            co,
            [founded_step(co), capital_step(country[co["founded_in"]])],
        )
    for p in people:
        emp = company[p["employer"]]
        add(f"Where was {p['name']} born?", "birthplace", p, [born_step(p)])
        add(f"Which company does {p['name']} work for?", "employer", p, [employer_step(p)])
        add(
            f"In which country was {p['name']} born?",
            "birth_country",
            p,
            [born_step(p), city_country_step(city_of[p["birthplace"]])],
        )
        add(
            f"In which city is the employer of {p['name']} headquartered?",
            "employer_headquarters",
            p,
            [employer_step(p), hq_step(emp)],
        )
        add(
            f"In which country was the employer of {p['name']} founded?",
            "employer_founded",
            p,
            [employer_step(p), founded_step(emp)],
        )
    seen: set[str] = set()
    for text, *_ in out:
        if text in seen:  # names are unique, so this would be a generator bug
            raise AssertionError(f"duplicate question generated: {text!r}")
        seen.add(text)
    return out


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


def _finding(step: ChainStep) -> str:
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
        known.append(_finding(step))
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
    known = [_finding(step) for step in question.chain[:searches]]
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


def oracle_hit_rate(
    world: World,
    k: int = 3,
    *,
    stemmer_language: str | None = "english",
    stopwords: str = "en",
    k1: float = 0.9,
    b: float = 0.4,
) -> dict[str, float]:
    """Fraction of oracle queries whose gold passage BM25 ranks in the top ``k``.

    Uses bm25s with the retriever's defaults (Lucene BM25, k1=0.9, b=0.4, English stemming
    and stopwords) over the world's corpus; returns ``top1`` and ``top{k}`` rates and the
    number of queries checked (every step of every question, train and test).
    """
    import bm25s

    stemmer = None
    if stemmer_language:
        import Stemmer

        stemmer = Stemmer.Stemmer(stemmer_language)
    corpus = [p["contents"] for p in world.passages]
    ids = [p["id"] for p in world.passages]
    model = bm25s.BM25(k1=k1, b=b, method="lucene")
    model.index(
        bm25s.tokenize(corpus, stopwords=stopwords, stemmer=stemmer, show_progress=False), show_progress=False
    )
    steps = [s for q in world.train_questions + world.test_questions for s in q.chain]
    queries = sorted({s.query for s in steps})
    tokens = bm25s.tokenize(queries, stopwords=stopwords, stemmer=stemmer, show_progress=False)
    rows, _ = model.retrieve(tokens, k=k, show_progress=False, n_threads=1)
    ranked = {q: [ids[int(r)] for r in row] for q, row in zip(queries, rows, strict=True)}
    top1 = sum(ranked[s.query][0] == s.passage_id for s in steps)
    topk = sum(s.passage_id in ranked[s.query] for s in steps)
    return {"top1": top1 / len(steps), f"top{k}": topk / len(steps), "queries": float(len(steps))}
