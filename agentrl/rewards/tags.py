"""Reading the tag structure of a Search-R1 response.

The response is what the policy wrote plus the ``<information>`` blocks the environment
inserted; it never includes the prompt (the prompt's example ``<answer> Beijing </answer>``
must not be scored). Everything here is plain string processing so it can run anywhere.

The grammar knows the run's tool tags (``tool_tags``: the tags of ``actor.rollout.tools``,
``("search",)`` by default, the quickstart's one tool); a call of any of them is answered by
one ``<information>`` block.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from agentrl.tool_identity import SEARCH_ONLY

__all__ = [
    "DEFAULT_TOOL_TAGS",
    "Block",
    "ResponseStructure",
    "extract_answer",
    "information_texts",
    "parse_response",
]

DEFAULT_TOOL_TAGS: tuple[str, ...] = SEARCH_ONLY.tags  # the default experiment's tools: one SearchTool
_PROTOCOL_TAGS = ("think", "information", "answer")
_INFORMATION = re.compile(r"<information>.*?(?:</information>|\Z)", re.DOTALL)
# an <answer> whose body holds no further <answer> opening, so the innermost/last one wins
_ANSWER = re.compile(r"<answer>((?:(?!<answer>).)*?)</answer>", re.DOTALL)


@dataclass(frozen=True)
class Block:
    """One ``<tag>…</tag>`` block of a response, in order of appearance."""

    tag: str
    content: str


@dataclass(frozen=True)
class ResponseStructure:
    """The blocks of a response and, if the structure is broken, why.

    ``problem`` is None for a well-formed response. A well-formed response is
    ``think (search information think)* answer`` with only whitespace between blocks:
    the policy reasons first, every search is answered by exactly one information block,
    it reasons again after each new piece of information, and it ends with exactly one
    answer. The grammar is strict on purpose: it is what the Search-R1 instruction asks for.
    """

    blocks: tuple[Block, ...]
    problem: str | None

    @property
    def well_formed(self) -> bool:
        return self.problem is None

    @property
    def num_searches(self) -> int:
        return self.count("search")

    def count(self, tag: str) -> int:
        """Complete ``<tag>`` blocks read (a tool's calls, for a tool tag)."""
        return sum(b.tag == tag for b in self.blocks)


def information_texts(response_text: str) -> list[str]:
    """The bodies of all complete ``<information>`` blocks (what the retriever returned)."""
    return [b.content for b in parse_response(response_text).blocks if b.tag == "information"]


def extract_answer(response_text: str) -> str | None:
    """The stripped text of the LAST complete ``<answer>…</answer>`` in the response.

    Retrieved documents are removed first: an ``<answer>`` that happens to occur inside an
    ``<information>`` block was written by the corpus, not the policy. Returns None when the
    response has no complete answer tag (e.g. truncated mid-answer); an empty answer gives "".
    """
    if not isinstance(response_text, str):
        raise TypeError(f"response_text must be a str, got {type(response_text).__name__}")
    own_text = _INFORMATION.sub(" ", response_text)
    matches = _ANSWER.findall(own_text)
    return matches[-1].strip() if matches else None


@lru_cache(maxsize=32)
def _grammar(tool_tags: tuple[str, ...]) -> tuple[re.Pattern[str], dict[str | None, frozenset[str]]]:
    """The tag pattern and each block's allowed successors for ``think (CALL information think)*
    answer``, CALL being any of ``tool_tags``."""
    reserved = sorted(set(tool_tags) & set(_PROTOCOL_TAGS))
    if reserved:
        raise ValueError(f"tool tags {reserved} are the protocol's own tags, not tools")
    names = "|".join(map(re.escape, (*_PROTOCOL_TAGS, *tool_tags)))
    successors: dict[str | None, frozenset[str]] = {
        None: frozenset({"think"}),
        "think": frozenset({*tool_tags, "answer"}),
        "information": frozenset({"think"}),
    }
    successors |= {tag: frozenset({"information"}) for tag in tool_tags}
    return re.compile(rf"<(/?)({names})>"), successors


def parse_response(response_text: str, tool_tags: Sequence[str] = DEFAULT_TOOL_TAGS) -> ResponseStructure:
    """Split a response into tag blocks and check them against the Search-R1 grammar, any of
    ``tool_tags`` being a call.

    Parsing never fails: a broken response yields the blocks read so far and a ``problem``
    message (useful in logs when a policy learns a degenerate format). Inside an
    ``<information>`` block only ``</information>`` is recognised, because retrieved text
    may contain anything. A tag that is no tool's is text.
    """
    tag_pattern, successors = _grammar(tuple(tool_tags))
    blocks: list[Block] = []
    problem: str | None = None
    pos = 0
    n = len(response_text)
    while pos < n:
        m = tag_pattern.search(response_text, pos)
        gap = response_text[pos : m.start() if m else n]
        if gap.strip() and problem is None:
            problem = f"text outside tags: {gap.strip()[:40]!r}"
        if m is None:
            break
        closing, tag = m.group(1), m.group(2)
        if closing:
            problem = problem or f"</{tag}> without a matching <{tag}>"
            pos = m.end()
            continue
        body_start = m.end()
        if tag == "information":
            end = response_text.find("</information>", body_start)
            inner_problem = None
        else:
            nxt = tag_pattern.search(response_text, body_start)
            end = nxt.start() if nxt else -1
            inner_problem = None
            if nxt is not None and nxt.group(0) != f"</{tag}>":
                inner_problem = f"{nxt.group(0)} inside <{tag}>"
        if end < 0:
            problem = problem or f"<{tag}> is never closed"
            break
        if inner_problem:
            problem = problem or inner_problem
            # resume at the nested tag so the rest is still read
            pos = end
            continue
        blocks.append(Block(tag, response_text[body_start:end]))
        pos = end + len(f"</{tag}>")
    if problem is None:
        problem = _check_order(blocks, successors)
    return ResponseStructure(tuple(blocks), problem)


def _check_order(blocks: list[Block], successors: dict[str | None, frozenset[str]]) -> str | None:
    if not blocks:
        return "no tags"
    prev: str | None = None
    for i, b in enumerate(blocks):
        if prev == "answer":
            return f"<{b.tag}> after the final <answer>"
        if b.tag not in successors[prev]:
            where = "at the start" if prev is None else f"after <{prev}>"
            return f"<{b.tag}> {where} (block {i})"
        prev = b.tag
    if prev != "answer":
        return "does not end with <answer>"
    return None
