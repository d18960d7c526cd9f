"""The world's vocabulary: the word pools it draws from and the maker of unique invented names."""

from __future__ import annotations

import random
from collections.abc import Sequence

__all__ = [
    "COUNTRY_ENDINGS",
    "DISTRACTOR_KINDS",
    "FEATURES",
    "INDUSTRIES",
    "LANGUAGE_ENDINGS",
    "OCCUPATIONS",
    "NameMaker",
]

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
COUNTRY_ENDINGS = ["ia", "ar", "en", "or", "ova", "istan", "ir"]
LANGUAGE_ENDINGS = ["ic", "ish", "ese", "an"]
INDUSTRIES = [
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
OCCUPATIONS = [
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
FEATURES = [
    "its old harbour",
    "a large stone bridge",
    "its spring market",
    "a famous observatory",
    "its clock tower",
    "wide canals",
    "a hillside monastery",
    "its botanical garden",
]
DISTRACTOR_KINDS = ["Festival", "Accord", "Prize", "Expedition", "Games"]


class NameMaker:
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
