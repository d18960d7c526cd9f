"""The evaluation run: one model, one mode, several QA datasets → per-question records and metrics.

    results = evaluate("runs/x/checkpoints/step_100", [DatasetSpec("nq", "nq/test.jsonl", limit=200)],
                       "agent", "http://127.0.0.1:8000/retrieve", out_dir="runs/x/eval/agent")

Every mode generates through ``LLMGenerationManager`` with the same engine and the same
decoding, so the modes differ only in what the question's prompt holds and in which tools
exist:

=========  ========================================  ===============  =========
mode       prompt                                    tools            max_turns
=========  ========================================  ===============  =========
direct     question, answer format                   none             0
rag        top-k docs for the question + question    none             0
agent      the training prompt (Search-R1 format)    the config's     ``max_turns``
=========  ========================================  ===============  =========

The agent's tools are ``settings.rollout.tools`` (a trained config's, one ``SearchTool`` by
default), built as the rollout builds them; every search tool among them asks the
evaluation's retriever with ``settings.topk`` (``backends.agent_tools``).

With ``max_turns=0`` the manager runs exactly one turn that stops at ``</answer>``, so the
one-shot modes get the same stop handling, budgets and token accounting as the agent.

Records are scored by ``records.trajectory_record``, the rule the trainer's validation and
the quickstart use too, under the answer-extraction rule ``EvalSettings.answer_rule``
(``agentrl.eval.extraction``: ``tag``, the default, or the fair baseline protocol
``tag-or-first-line``), one rule for every mode and recorded in the settings. Nothing here
builds a critic, an optimiser or a reference model. With ``out_dir`` the records go to a
resumable ``predictions.jsonl`` (see ``store.py``) and the per-dataset metrics to
``metrics.json`` / ``metrics.md``; without it everything stays in memory.

With a ``judge`` (``--judge``), each chunk's records are also judged by the LLM judge before they
are written (``judged.py``: the record's ``judged``, and a ``judged`` column with its interval).

Tool errors stop the evaluation (``tool_error_policy="raise"``): a retriever that died
halfway would otherwise turn into error observations and quietly lower the numbers. The
records written so far are kept and the run resumes where it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from agentrl.agent.generation import LLMGenerationManager
from agentrl.eval.backends import EvalModel, agent_tools, mode_retriever, retrieve, tool_names
from agentrl.eval.datasets import DatasetSpec, EvalQuestion, load_all
from agentrl.eval.judged import judge_header, judge_records
from agentrl.eval.prompts import MODES, build_prompt
from agentrl.eval.records import trajectory_record
from agentrl.eval.report import aggregate
from agentrl.eval.results import EvalResults
from agentrl.eval.settings import EvalSettings
from agentrl.eval.store import PREDICTIONS_FILE, ResultsStore
from agentrl.rewards.judge import LLMJudge
from agentrl.tools.retrieval.client import RetrieverClient

__all__ = ["evaluate"]

# Settings that may change between an interrupted run and its continuation. ``answer_rule``
# is not one: records scored under two rules must not share a table.
RUNTIME_SETTINGS = ("batch_size", "retriever_url", "engine")
# Settings a results file written before they existed lacks, with the value it was made under.
LEGACY_SETTINGS = {"answer_rule": "tag"}


def evaluate(
    model: EvalModel | str | Path,
    datasets: Sequence[DatasetSpec | str | Path],
    mode: str,
    retriever_url: str | None = None,
    *,
    settings: EvalSettings | None = None,
    out_dir: str | Path | None = None,
    corpus: str | None = None,
    progress: bool = True,
    judge: LLMJudge | None = None,
) -> EvalResults:
    """Evaluate one model in one mode on ``datasets``; see the module docstring.

    Args:
        model: what is evaluated and how its engine is opened (``EvalModel``); a model directory
            or checkpoint alone stands for ``EvalModel(path)`` (the HF engine, its own tokenizer).
        datasets: ``DatasetSpec``s, or paths (named after their directory).
        mode: ``direct`` | ``rag`` | ``agent``.
        retriever_url: the retriever's ``/retrieve`` URL (rag, and agent with a search tool).
        out_dir: where ``predictions.jsonl`` / ``metrics.json`` / ``metrics.md`` go; an
            existing ``predictions.jsonl`` with the same settings is resumed.
        corpus: a label recorded in the settings: what the retriever indexed.
        judge: an LLM judge that scores each record's prediction too (``judged.py``).
    """
    settings = settings or EvalSettings()
    # before the model: a bad data file, tool or retriever fails in seconds
    plan = _Plan.make(mode, datasets, settings, retriever_url, corpus, judge)
    target = model if isinstance(model, EvalModel) else EvalModel(model)
    eng, tokenizer, model_name, owned = target.open()
    header = plan.header(model_name, target.engine_label(eng, owned))
    out = Path(out_dir) if out_dir is not None else None
    store, records = _resumed(out, header)
    resumed = len(records)
    manager = _manager(eng, tokenizer, mode, settings, plan.tools)
    start = time.perf_counter()
    try:
        _score(manager, plan, store, records, progress)
    finally:
        if owned:
            eng.shutdown()

    plan.sort(records)
    summary = aggregate(records, tools=tool_names(plan.tools))
    results = EvalResults(header, summary, records, out, time.perf_counter() - start, resumed)
    if out:
        results.write(out)
    return results


def _score(
    manager: LLMGenerationManager,
    plan: _Plan,
    store: ResultsStore | None,
    records: list[dict[str, Any]],
    progress: bool,
) -> None:
    """Score the questions ``store`` has no record of yet, appending each chunk's records to
    ``records`` and to the store as it comes (a run stopped halfway resumes after them)."""
    done = store.done if store else set()
    questions = plan.questions()
    pending = [q for q in questions if (q.dataset, q.id) not in done]
    bar = tqdm(
        total=len(questions),
        initial=len(questions) - len(pending),
        desc=f"eval {plan.mode}",
        unit="q",
        disable=not progress,
        dynamic_ncols=True,
    )
    try:
        for new in _score_in_chunks(manager, plan, pending):
            if plan.judge is not None:  # before the store: a resumed run keeps the judged values
                new = judge_records(plan.judge, new)
            if store:
                store.append(new)
            records.extend(new)
            bar.update(len(new))
            bar.set_postfix(em=f"{sum(r['em'] for r in records) / len(records):.3f}")
    finally:
        bar.close()


@dataclass(frozen=True)
class _Plan:
    """What one evaluation runs, settled before any model loads (a bad data file, tool or
    retriever fails in seconds): the mode and settings, the questions of each dataset, the
    retriever (its URL and what it says about itself), the agent's tools and the LLM judge."""

    mode: str
    settings: EvalSettings
    specs: list[DatasetSpec]
    data: dict[str, list[EvalQuestion]]
    retriever_url: str | None
    retriever: dict[str, Any] | None
    tools: list[Any]
    judge: LLMJudge | None = None

    @classmethod
    def make(
        cls,
        mode: str,
        datasets: Sequence[DatasetSpec | str | Path],
        settings: EvalSettings,
        retriever_url: str | None,
        corpus: str | None,
        judge: LLMJudge | None = None,
    ) -> _Plan:
        specs = _dataset_specs(mode, datasets)
        retriever = mode_retriever(mode, settings.rollout.tools, retriever_url, corpus)
        data = load_all(specs)
        tools = _tools(mode, settings, retriever_url)
        return cls(mode, settings, specs, data, retriever_url, retriever, tools, judge)

    def questions(self) -> list[EvalQuestion]:
        """Every question, dataset after dataset, in file order."""
        return [q for qs in self.data.values() for q in qs]

    def sort(self, records: list[dict[str, Any]]) -> None:
        """``records`` in the order of :meth:`questions` (resumed and new ones interleave on disk)."""
        order = {(q.dataset, q.id): k for k, q in enumerate(self.questions())}
        records.sort(key=lambda r: order.get((r["dataset"], r["id"]), len(order)))

    def header(self, model_name: str, engine: str) -> dict[str, Any]:
        """The settings recorded beside the numbers (and compared when a run resumes)."""
        mode, settings = self.mode, self.settings
        # only with a judge: a results file of an evaluation without one keeps its settings as they were
        judged = {"judge": judge_header(self.judge)} if self.judge is not None else {}
        return {
            "mode": mode,
            "model": model_name,
            "engine": engine,
            "retriever": self.retriever,
            "retriever_url": self.retriever_url if self.retriever else None,
            "topk": settings.topk if mode != "direct" else None,
            "max_turns": settings.max_turns if mode == "agent" else 0,
            "decoding": settings.decoding(),
            "budgets": {
                "max_prompt_length": settings.max_prompt_length,
                "max_response_length": settings.max_response_length,
                "max_obs_length": settings.max_obs_length if mode == "agent" else None,
            },
            "schedule": settings.schedule,
            "answer_rule": settings.answer_rule,
            "batch_size": settings.batch_size,
            "datasets": {s.name: s.describe() | {"questions": len(self.data[s.name])} for s in self.specs},
            **judged,
        }


def _resumed(out: Path | None, header: dict[str, Any]) -> tuple[ResultsStore | None, list[dict[str, Any]]]:
    """The results store under ``out`` (None without one) and the records it already holds."""
    if out is None:
        return None, []
    store = ResultsStore(out / PREDICTIONS_FILE, header, ignore=RUNTIME_SETTINGS, legacy=LEGACY_SETTINGS)
    # a record resumed from a file older than ``extracted`` was scored under ``tag``: never extracted
    return store, [{"extracted": False} | r for r in store.records]


def _dataset_specs(mode: str, datasets: Sequence[DatasetSpec | str | Path]) -> list[DatasetSpec]:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    specs = [
        d if isinstance(d, DatasetSpec) else DatasetSpec(Path(d).parent.name or Path(d).stem, str(d))
        for d in datasets
    ]
    if not specs:
        raise ValueError("evaluate: no datasets given")
    return specs


def _tools(mode: str, settings: EvalSettings, retriever_url: str | None) -> list[Any]:
    """The agent's tools (``backends.agent_tools``); none in the one-shot modes."""
    if mode != "agent":
        return []
    return agent_tools(settings.rollout.tools, retriever_url, settings.topk, settings.retriever_timeout_s)


def _manager(eng: Any, tokenizer: Any, mode: str, settings: EvalSettings, tools: Sequence[Any]):
    """The rollout every mode goes through; only the agent gets tools (``tools``) and turns."""
    # The settings' rollout as it is, but for three things the evaluation decides: a one-shot mode
    # has no turns to search in, a dead retriever must stop the run rather than lower its numbers,
    # and the tools are the ones built above (the search tools ask the evaluation's retriever).
    config = replace(
        settings.rollout,
        max_turns=settings.max_turns if mode == "agent" else 0,
        tool_error_policy="raise",
        tools=[],
    )
    return LLMGenerationManager(
        eng,
        tokenizer,
        config,
        max_prompt_length=settings.max_prompt_length,
        max_response_length=settings.max_response_length,
        tools=tools,
    )


def _score_in_chunks(
    manager: LLMGenerationManager, plan: _Plan, pending: Sequence[EvalQuestion]
) -> Iterator[list[dict[str, Any]]]:
    """The records of ``pending``, ``settings.batch_size`` questions at a time (rag retrieves first)."""
    settings, mode, tokenizer = plan.settings, plan.mode, manager.tokenizer
    client = None
    if mode == "rag":
        client = RetrieverClient(
            plan.retriever_url,
            timeout_s=settings.retriever_timeout_s,
            deadline_s=3 * settings.retriever_timeout_s,
        )
    for i in range(0, len(pending), settings.batch_size):
        chunk = pending[i : i + settings.batch_size]
        docs: list[list[dict] | None] = (
            retrieve(client, chunk, settings.topk) if client else [None] * len(chunk)
        )
        prompts = [build_prompt(tokenizer, mode, q, d) for q, d in zip(chunk, docs, strict=True)]
        trajectories = manager.run(prompts, settings.sampling()).trajectories
        yield [
            trajectory_record(
                t,
                tokenizer,
                q.golden_answers,
                dataset=q.dataset,
                question_id=q.id,
                question=q.question,
                documents=d,
                answer_rule=settings.answer_rule,
            )
            for q, t, d in zip(chunk, trajectories, docs, strict=True)
        ]
