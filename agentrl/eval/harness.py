"""The evaluation core: one model, one mode, several QA datasets → per-question records and metrics.

    results = evaluate("runs/x/checkpoints/step_100", None, [DatasetSpec("nq", "nq/test.jsonl", limit=200)],
                       "agent", "http://127.0.0.1:8000/retrieve", out_dir="runs/x/eval/agent")

Every mode generates through ``LLMGenerationManager`` with the same engine and the same
decoding, so the modes differ only in what the question's prompt holds and in which tools
exist:

=========  ========================================  ======  =========
mode       prompt                                    tools   max_turns
=========  ========================================  ======  =========
direct     question, answer format                   none    0
rag        top-k docs for the question + question    none    0
agent      the training prompt (Search-R1 format)    search  ``max_turns``
=========  ========================================  ======  =========

With ``max_turns=0`` the manager runs exactly one turn that stops at ``</answer>``, so the
one-shot modes get the same stop handling, budgets and token accounting as the agent.

Records are scored by ``records.trajectory_record``, the rule the trainer's validation and
the quickstart use too, under the answer-extraction rule ``EvalSettings.answer_rule``
(``agentrl.eval.extraction``: ``tag``, the default, or the fair baseline protocol
``tag-or-first-line``), one rule for every mode and recorded in the settings. Nothing here
builds a critic, an optimiser or a reference model. With ``out_dir`` the records go to a
resumable ``predictions.jsonl`` (see ``store.py``) and the per-dataset metrics to
``metrics.json`` / ``metrics.md``; without it everything stays in memory.

Tool errors stop the evaluation (``tool_error_policy="raise"``): a retriever that died
halfway would otherwise turn into error observations and quietly lower the numbers. The
records written so far are kept and the run resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from agentrl.agent.generation import LLMGenerationManager
from agentrl.agent.tools.search import SearchTool
from agentrl.agent.tools.search_client import RetrieverClient, RetrieverError
from agentrl.config.schema import RolloutConfig
from agentrl.engines import ENGINE_KINDS, SamplingParams, build_engine
from agentrl.eval.datasets import DatasetSpec, EvalQuestion, load_all
from agentrl.eval.extraction import check_answer_rule
from agentrl.eval.prompts import MODES, build_prompt
from agentrl.eval.records import trajectory_record
from agentrl.eval.report import aggregate
from agentrl.eval.results import EvalResults
from agentrl.eval.store import PREDICTIONS_FILE, ResultsStore

__all__ = ["EvalResults", "EvalSettings", "evaluate", "resolve_model_dir"]

# Settings that may change between an interrupted run and its continuation. ``answer_rule``
# is not one: records scored under two rules must not share a table.
RUNTIME_SETTINGS = ("batch_size", "retriever_url", "engine")
# Settings a results file written before they existed lacks, with the value it was made under.
LEGACY_SETTINGS = {"answer_rule": "tag"}


@dataclass(frozen=True)
class EvalSettings:
    """Decoding, budgets and retrieval of an evaluation (recorded beside the numbers).

    Greedy by default, as in the Search-R1 evaluation. ``max_tokens_per_turn`` caps each
    generation; ``max_response_length`` caps all turns plus observations of one answer.
    ``batch_size`` questions are rolled out (and written to disk) at a time.
    ``answer_rule`` (one of ``extraction.ANSWER_RULES``) picks what a record scores: the
    accepted ``<answer>`` tag only (``tag``) or, failing one, a short answer read from the
    last model turn (``tag-or-first-line``, the fair baseline protocol).
    """

    topk: int = 3
    max_turns: int = 2
    greedy: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    max_tokens_per_turn: int = 256
    max_prompt_length: int = 2048
    max_response_length: int = 1024
    max_obs_length: int = 512
    schedule: str = "lockstep"
    batch_size: int = 32
    retriever_timeout_s: float = 30.0
    answer_rule: str = "tag"

    def __post_init__(self) -> None:
        check_answer_rule(self.answer_rule, "EvalSettings.answer_rule")
        for name in ("topk", "max_tokens_per_turn", "max_prompt_length", "max_response_length", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"EvalSettings.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_turns < 0:
            raise ValueError(f"EvalSettings.max_turns must be >= 0, got {self.max_turns}")
        if not self.greedy and self.temperature <= 0:
            raise ValueError(f"EvalSettings.temperature must be > 0 when sampling, got {self.temperature}")

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            max_new_tokens=self.max_tokens_per_turn,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            greedy=self.greedy,
            seed=None if self.greedy else self.seed,
        )

    def decoding(self) -> dict[str, Any]:
        if self.greedy:
            return {"greedy": True, "max_tokens_per_turn": self.max_tokens_per_turn}
        return {
            "greedy": False,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "seed": self.seed,
            "max_tokens_per_turn": self.max_tokens_per_turn,
        }


def resolve_model_dir(path: str | Path) -> Path:
    """A model directory, or a training checkpoint ``step_N`` whose policy is in ``actor/``."""
    p = Path(path)
    if (p / "config.json").is_file():
        return p
    if (p / "actor" / "config.json").is_file():
        return p / "actor"
    raise FileNotFoundError(
        f"model {str(p)!r}: expected a Hugging Face model directory (config.json) or a training "
        f"checkpoint directory with an actor/ subdirectory"
    )


def _open_engine(
    model: Any, tokenizer: Any, engine: str, engine_kwargs: Mapping[str, Any]
) -> tuple[Any, Any, str, bool]:
    """``(engine, tokenizer, model name, owned)`` from a path, an ``nn.Module`` or an Engine."""
    if isinstance(model, (str, Path)):
        model_dir = resolve_model_dir(model)
        if engine not in ENGINE_KINDS:
            raise ValueError(f"engine must be one of {ENGINE_KINDS}, got {engine!r}")
        if tokenizer is None:
            from agentrl.models.loading import load_tokenizer

            tokenizer = load_tokenizer(model_dir)
        return build_engine(engine, model_path=model_dir, **engine_kwargs), tokenizer, str(model_dir), True
    if tokenizer is None:
        raise ValueError("evaluate: a tokenizer is required when passing a model object or an engine")
    if hasattr(model, "generate_batch"):
        return model, tokenizer, type(model).__name__, False
    import torch

    if isinstance(model, torch.nn.Module):
        name = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
        return (
            build_engine("hf", model=model, tokenizer=tokenizer, **engine_kwargs),
            tokenizer,
            str(name),
            True,
        )
    raise TypeError(f"evaluate: model must be a path, an nn.Module or an Engine, got {type(model).__name__}")


def retriever_info(url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """What the retriever at ``url`` says about itself (backend, corpus size, index), checking it is up."""
    client = RetrieverClient(url, timeout_s=timeout_s, deadline_s=timeout_s, max_attempts=2)

    async def ask() -> dict:
        try:
            return await client.health()
        finally:
            await client.close()

    try:
        body = asyncio.run(ask())
    except RetrieverError as exc:
        raise RuntimeError(f"retriever_url {url!r}: the retriever is not reachable ({exc})") from None
    if not body.get("ready"):
        raise RuntimeError(
            f"retriever_url {url!r}: the retriever is not ready (status {body.get('status')!r})"
        )
    return {k: body.get(k) for k in ("backend", "corpus_size", "index")}


def _retrieve(client: RetrieverClient, questions: Sequence[EvalQuestion], topk: int) -> list[list[dict]]:
    async def once() -> list[list[dict]]:
        try:
            return await client.retrieve([q.question for q in questions], topk)
        finally:
            await client.close()

    return asyncio.run(once())


def evaluate(
    model: Any,
    tokenizer: Any,
    datasets: Sequence[DatasetSpec | str | Path],
    mode: str,
    retriever_url: str | None = None,
    *,
    settings: EvalSettings | None = None,
    out_dir: str | Path | None = None,
    engine: str = "hf",
    engine_kwargs: Mapping[str, Any] | None = None,
    model_name: str | None = None,
    corpus: str | None = None,
    progress: bool = True,
) -> EvalResults:
    """Evaluate one model in one mode on ``datasets``; see the module docstring.

    Args:
        model: a model directory or checkpoint (``step_N`` with ``actor/``), an ``nn.Module``
            (wrapped in the HF engine) or any ``Engine``.
        tokenizer: required unless ``model`` is a path (then loaded from it).
        datasets: ``DatasetSpec``s, or paths (named after their directory).
        mode: ``direct`` | ``rag`` | ``agent``.
        retriever_url: the retriever's ``/retrieve`` URL (rag and agent).
        out_dir: where ``predictions.jsonl`` / ``metrics.json`` / ``metrics.md`` go; an
            existing ``predictions.jsonl`` with the same settings is resumed.
        engine, engine_kwargs: which engine to build for a path (``hf`` | ``vllm``) and its
            options (``max_batch_size``, ``dtype``, ...).
        model_name, corpus: labels recorded in the settings (default: the model's path;
            the corpus is what the retriever indexed).
    """
    settings = settings or EvalSettings()
    specs = _dataset_specs(mode, datasets)
    retriever = None
    if mode != "direct":
        if not retriever_url:
            raise ValueError(f"mode {mode!r} needs retriever_url (the retriever's /retrieve endpoint)")
        retriever = retriever_info(retriever_url) | {"corpus": corpus}
    data = load_all(specs)  # before the model: a bad data file fails in seconds

    eng, tokenizer, default_name, owned = _open_engine(model, tokenizer, engine, dict(engine_kwargs or {}))
    header = _header(
        mode,
        settings,
        specs,
        data,
        model_name or default_name,
        engine if owned else type(eng).__name__,
        retriever,
        retriever_url,
    )
    out = Path(out_dir) if out_dir is not None else None
    store = (
        ResultsStore(out / PREDICTIONS_FILE, header, ignore=RUNTIME_SETTINGS, legacy=LEGACY_SETTINGS)
        if out
        else None
    )
    # a record resumed from a file older than ``extracted`` was scored under ``tag``: never extracted
    records: list[dict[str, Any]] = [{"extracted": False} | r for r in store.records] if store else []
    resumed, done = len(records), store.done if store else set()
    pending = [q for qs in data.values() for q in qs if (q.dataset, q.id) not in done]
    total = sum(len(qs) for qs in data.values())
    manager = _manager(eng, tokenizer, mode, settings, retriever_url)
    start = time.perf_counter()
    bar = tqdm(
        total=total,
        initial=total - len(pending),
        desc=f"eval {mode}",
        unit="q",
        disable=not progress,
        dynamic_ncols=True,
    )
    try:
        for new in _score_in_chunks(manager, tokenizer, mode, pending, settings, retriever_url):
            if store:
                store.append(new)
            records.extend(new)
            bar.update(len(new))
            bar.set_postfix(em=f"{sum(r['em'] for r in records) / len(records):.3f}")
    finally:
        bar.close()
        if owned:
            eng.shutdown()

    order = {(q.dataset, q.id): k for k, q in enumerate(q for qs in data.values() for q in qs)}
    records.sort(key=lambda r: order.get((r["dataset"], r["id"]), len(order)))
    results = EvalResults(header, aggregate(records), records, out, time.perf_counter() - start, resumed)
    if out:
        results.write(out)
    return results


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


def _header(
    mode: str,
    settings: EvalSettings,
    specs: Sequence[DatasetSpec],
    data: Mapping[str, list],
    model_name: str,
    engine: str,
    retriever: dict | None,
    retriever_url: str | None,
) -> dict[str, Any]:
    """The settings recorded beside the numbers (and compared when a run resumes)."""
    return {
        "mode": mode,
        "model": model_name,
        "engine": engine,
        "retriever": retriever,
        "retriever_url": retriever_url if retriever else None,
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
        "datasets": {s.name: s.describe() | {"questions": len(data[s.name])} for s in specs},
    }


def _manager(eng: Any, tokenizer: Any, mode: str, settings: EvalSettings, retriever_url: str | None):
    """The rollout every mode goes through; only the agent gets the search tool and turns."""
    tools = {}
    if mode == "agent":
        tools = {
            "search": SearchTool(retriever_url, topk=settings.topk, timeout_s=settings.retriever_timeout_s)
        }
    config = RolloutConfig(
        max_turns=settings.max_turns if mode == "agent" else 0,
        max_tokens_per_turn=settings.max_tokens_per_turn,
        max_obs_length=settings.max_obs_length,
        schedule=settings.schedule,
        tool_error_policy="raise",
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k,
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
    manager: LLMGenerationManager,
    tokenizer: Any,
    mode: str,
    pending: Sequence[EvalQuestion],
    settings: EvalSettings,
    retriever_url: str | None,
) -> Iterator[list[dict[str, Any]]]:
    """The records of ``pending``, ``settings.batch_size`` questions at a time (rag retrieves first)."""
    client = None
    if mode == "rag":
        client = RetrieverClient(
            retriever_url, timeout_s=settings.retriever_timeout_s, deadline_s=3 * settings.retriever_timeout_s
        )
    for i in range(0, len(pending), settings.batch_size):
        chunk = pending[i : i + settings.batch_size]
        docs: list[list[dict] | None] = (
            _retrieve(client, chunk, settings.topk) if client else [None] * len(chunk)
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
