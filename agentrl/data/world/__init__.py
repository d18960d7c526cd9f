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

and, opt-in (``numbers=True``), an age per company (founded N years ago) and per person.

Modules:

- :mod:`.names`: the word pools and the maker of unique invented names.
- :mod:`.generation`: entities, passages and the train/test split (:func:`generate_world`),
  and :func:`write_world`.
- :mod:`.questions`: the one- and two-hop :class:`Question` records and their construction.
- :mod:`.oracle`: scripted model turns (:func:`oracle_trajectory`, :func:`guess_trajectory`).
- :mod:`.numbers`: the opt-in numeric facts (company and person ages, ``generate_world(numbers=True)``)
  and the arithmetic questions that need two searches and one ``calculate``.
- :mod:`.hermes`: the scripted turns in the ``hermes`` tool-call format
  (:func:`hermes_oracle_trajectory`, :func:`hermes_guess_trajectory`).
- :mod:`.retrieval`: :func:`oracle_hit_rate`, the BM25 check of the oracle's queries.
"""

from __future__ import annotations

from .generation import World, generate_world, write_world
from .hermes import hermes_call, hermes_guess_trajectory, hermes_oracle_trajectory
from .oracle import Turn, guess_trajectory, oracle_text, oracle_trajectory
from .questions import DATASET_NAME, ChainStep, Question
from .retrieval import oracle_hit_rate

__all__ = [
    "DATASET_NAME",
    "ChainStep",
    "Question",
    "Turn",
    "World",
    "generate_world",
    "guess_trajectory",
    "hermes_call",
    "hermes_guess_trajectory",
    "hermes_oracle_trajectory",
    "oracle_hit_rate",
    "oracle_text",
    "oracle_trajectory",
    "write_world",
]
