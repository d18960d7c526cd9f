"""SFT demonstrations for real QA questions: scripted search turns played through the real rollout.

A demonstration is search → read → answer, written by a script and played through the real
``LLMGenerationManager`` with the real search tool (``record_scripted_trajectories``), so
the observations, their truncation and the final-turn note are exactly what RL will show:

* one-hop question (NQ, TriviaQA): ``<search> question </search>``, then the answer;
* two-hop question (HotpotQA, with its two supporting passages' titles known): a search for
  the question, then a search for the supporting title the first search did not return (the
  bridge entity or the second compared entity), then the answer.

The answer written is the first golden answer that occurs, on token boundaries after SQuAD
normalisation, in the documents the searches return ("gold in retrieved docs"); a question
whose searches return no golden answer is rejected, and so is a played trajectory whose
observations (after truncation to ``max_obs_length``) no longer contain it. Yes/no answers
are never demonstrated: "gold in docs" says nothing for them. ``balanced_by_searches`` picks
the warm start's mix of one- and two-search demonstrations.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.rewards.match import gold_in_documents, normalize_answer

__all__ = [
    "DemoPlan",
    "answerable",
    "DemoReport",
    "balanced_by_searches",
    "plan_demonstrations",
    "record_search_demonstrations",
    "script_turns",
    "search_counts",
    "supporting_titles",
]

SEARCH_THOUGHT = "<think> I need to look this up. </think>\n<search> {query} </search>"
BRIDGE_THOUGHT = "<think> I also need to know about {query}. </think>\n<search> {query} </search>"
ANSWER_THOUGHT = "<think> The documents give the answer. </think>\n<answer> {answer} </answer>"


@dataclass(frozen=True)
class DemoPlan:
    """One question's demonstration: its queries in order and the answer the documents hold."""

    record: Mapping[str, Any]
    queries: tuple[str, ...]
    answer: str


def script_turns(plan: DemoPlan) -> list[str]:
    """The model turns of a plan: one per query, then the answer turn."""
    turns = [SEARCH_THOUGHT.format(query=plan.queries[0])]
    turns += [BRIDGE_THOUGHT.format(query=q) for q in plan.queries[1:]]
    return turns + [ANSWER_THOUGHT.format(answer=plan.answer)]


def supporting_titles(context_file: str | Path) -> dict[str, list[str]]:
    """HotpotQA id -> the titles of its supporting paragraphs, in first-mention order."""
    out: dict[str, list[str]] = {}
    with Path(context_file).open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                titles: list[str] = []
                for title, _ in row.get("supporting_facts") or []:
                    if title not in titles:
                        titles.append(title)
                out[str(row["id"])] = titles
    return out


def _title(doc: Mapping[str, Any]) -> str:
    return str(doc.get("contents", "")).partition("\n")[0].strip().strip('"')


def _answer_in(docs: Sequence[Mapping[str, Any]], golds: Sequence[str]) -> str | None:
    texts = [str(d.get("contents", "")) for d in docs]
    for gold in golds:
        if normalize_answer(gold) not in ("yes", "no") and gold_in_documents(texts, [gold]):
            return gold.strip()
    return None


def plan_demonstrations(
    records: Sequence[Mapping[str, Any]],
    retrieve: Any,
    titles: Mapping[str, Sequence[str]],
    topk: int,
) -> list[DemoPlan]:
    """Plans for the records whose searches return a golden answer.

    ``retrieve(queries) -> list[list[doc]]`` is the retriever (top ``topk``). A record is
    two-hop when ``titles`` knows two supporting titles for its id; other HotpotQA records
    (no titles) are skipped: their second query is unknown.
    """
    first = retrieve([r["question"] for r in records])
    plans: list[DemoPlan] = []
    second_queries: list[tuple[Mapping[str, Any], list[dict], str]] = []
    for record, docs in zip(records, first, strict=True):
        support = list(titles.get(str(record["id"]), ()))
        if record.get("dataset") == "hotpotqa" and len(support) < 2:
            continue
        if len(support) >= 2:
            seen = {_title(d) for d in docs}
            missing = [t for t in support if t not in seen]
            second_queries.append((record, docs, (missing or support[1:])[0]))
            continue
        answer = _answer_in(docs[:topk], record["golden_answers"])
        if answer is not None:
            plans.append(DemoPlan(record, (record["question"].strip(),), answer))
    if second_queries:
        second = retrieve([q for _, _, q in second_queries])
        for (record, docs, query), more in zip(second_queries, second, strict=True):
            answer = _answer_in(list(docs[:topk]) + list(more[:topk]), record["golden_answers"])
            if answer is not None:
                plans.append(DemoPlan(record, (record["question"].strip(), query), answer))
    return plans


def answerable(records: Sequence[Mapping[str, Any]], retrieve: Any, topk: int) -> list[Mapping[str, Any]]:
    """The records whose question, used as the query, retrieves a golden answer in the top
    ``topk`` (not yes/no): questions on which a searching policy can earn a reward, so an RL
    group of them is rarely all zeros. Order is kept."""
    found = retrieve([r["question"] for r in records])
    return [r for r, docs in zip(records, found, strict=True) if _answer_in(docs[:topk], r["golden_answers"])]


@dataclass(frozen=True)
class DemoReport:
    """What :func:`record_search_demonstrations` wrote and why the rest was dropped."""

    path: Path
    kept: int
    one_hop: int
    two_hop: int
    candidates: int
    no_gold_in_docs: int  # the planning searches returned no golden answer (or none was possible)
    prompt_too_long: int  # the question's prompt is over the RL prompt budget
    cut: int  # a turn or observation was cut by a length limit
    gold_lost: int  # the played observations (truncated) no longer held the answer

    def to_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}


def retriever(url: str, topk: int, chunk: int = 256) -> Any:
    """``retrieve(queries) -> list[list[doc]]`` over the HTTP retriever at ``url``, ``chunk``
    queries a request (the server caps a request's size)."""
    from agentrl.tools.retrieval.client import RetrieverClient

    client = RetrieverClient(url)

    def retrieve(queries: list[str]) -> list[list[dict]]:
        return [
            docs
            for i in range(0, len(queries), chunk)
            for docs in client.retrieve_sync(queries[i : i + chunk], topk)
        ]

    return retrieve


def record_search_demonstrations(
    records: Sequence[Mapping[str, Any]],
    titles: Mapping[str, Sequence[str]],
    tokenizer: Any,
    config: Any,
    retriever_url: str,
    out_file: str | Path,
    *,
    topk: int = 3,
) -> DemoReport:
    """Plan, play and dump (``agentrl.agent.dump`` format, reward 1) the demonstrations of
    ``records``; ``config`` is the experiment config whose rollout and length budgets RL uses."""
    from agentrl.agent.demonstrations import record_scripted_trajectories
    from agentrl.agent.dump import dump_trajectories
    from agentrl.agent.trajectory import Segment
    from agentrl.data.qa import to_training_rows
    from agentrl.eval.records import segment_text
    from agentrl.tools.retrieval.search import SearchTool
    from agentrl.trainer.dataset import prompt_spec

    plans = plan_demonstrations(records, retriever(retriever_url, topk), titles, topk)
    rows = to_training_rows([dict(p.record) for p in plans], "sft")
    for row, plan in zip(rows, plans, strict=True):  # the dump names each demonstration's question
        row["extra_info"]["id"] = str(plan.record["id"])
    prompts = [prompt_spec(row, tokenizer) for row in rows]
    planned = len(plans)
    fits = [i for i, p in enumerate(prompts) if len(p.prompt_ids) <= config.data.max_prompt_length]
    plans, prompts = [plans[i] for i in fits], [prompts[i] for i in fits]
    tool = SearchTool(url=retriever_url, topk=topk)
    complete, incomplete = record_scripted_trajectories(
        prompts,
        [script_turns(p) for p in plans],
        tokenizer,
        config.actor.rollout,
        max_prompt_length=config.data.max_prompt_length,
        max_response_length=config.data.max_response_length,
        tools=[tool],
        allow_observation_cut=True,
    )
    by_prompt = {tuple(p.prompt_ids): plan for p, plan in zip(prompts, plans, strict=True)}
    kept, lost = [], 0
    for traj in complete:
        plan = by_prompt[tuple(traj.prompt.prompt_ids)]
        # what the policy read: the observation tokens, after any cut
        if gold_in_documents([segment_text(tokenizer, traj, Segment.OBSERVATION)], [plan.answer]):
            kept.append(traj)
        else:
            lost += 1
    out = Path(out_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    dump_trajectories(kept, out, tokenizer, rewards=[1.0] * len(kept))
    two_hop = sum(1 for t in kept if len(by_prompt[tuple(t.prompt.prompt_ids)].queries) > 1)
    return DemoReport(
        path=out,
        kept=len(kept),
        one_hop=len(kept) - two_hop,
        two_hop=two_hop,
        candidates=len(records),
        no_gold_in_docs=len(records) - planned,
        prompt_too_long=planned - len(fits),
        cut=len(incomplete),
        gold_lost=lost,
    )


def search_counts(dump: Path) -> list[int]:
    """The searches of each recorded demonstration in ``dump`` (a rollout dump), in file order."""
    with dump.open(encoding="utf-8") as f:
        return [int(json.loads(line)["tool_calls"].get("search", 0)) for line in f if line.strip()]


def balanced_by_searches(examples: list, searches: Sequence[int], limit: int, seed: int) -> list:
    """At most ``limit`` examples, as evenly as the data allow over their number of searches
    (one-hop demonstrations are rarer than two-hop ones, and the warm start should not learn
    that every question takes two searches); shuffled with ``seed``."""
    if len(examples) != len(searches):
        raise ValueError(f"{len(examples)} examples but {len(searches)} search counts")
    rng = random.Random(seed)
    groups: dict[int, list] = {}
    for example, count in zip(examples, searches, strict=True):
        groups.setdefault(count, []).append(example)
    for group in groups.values():
        rng.shuffle(group)
    chosen: list = []
    order = sorted(groups, key=lambda k: len(groups[k]))
    for i, key in enumerate(order):
        share = (limit - len(chosen)) // (len(order) - i)  # what is left, split over the groups left
        chosen += groups[key][:share]
    rng.shuffle(chosen)
    return chosen
