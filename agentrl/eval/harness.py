"""The evaluation core: one model, one mode, several QA datasets → per-question records and metrics.

    results = evaluate("runs/x/checkpoints/step_100", None, [DatasetSpec("nq", "nq/test.jsonl", limit=200)],
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

Tool errors stop the evaluation (``tool_error_policy="raise"``): a retriever that died
halfway would otherwise turn into error observations and quietly lower the numbers. The
records written so far are kept and the run resumes where it stopped.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from agentrl.agent.generation import LLMGenerationManager
from agentrl.agent.sampling import rollout_sampling
from agentrl.config.schema import DataConfig, ExperimentConfig, RolloutConfig
from agentrl.engines import SamplingParams
from agentrl.eval.backends import (
    agent_tools,
    is_search_tool,
    mode_retriever,
    open_engine,
    resolve_model_dir,
    retrieve,
    tool_names,
)
from agentrl.eval.datasets import DatasetSpec, EvalQuestion, load_all
from agentrl.eval.extraction import check_answer_rule
from agentrl.eval.prompts import MODES, build_prompt
from agentrl.eval.records import trajectory_record
from agentrl.eval.report import aggregate
from agentrl.eval.results import EvalResults
from agentrl.eval.store import PREDICTIONS_FILE, ResultsStore
from agentrl.tools.retrieval.client import RetrieverClient

__all__ = ["EvalResults", "EvalSettings", "evaluate", "resolve_model_dir", "search_tool_options"]

# Settings that may change between an interrupted run and its continuation. ``answer_rule``
# is not one: records scored under two rules must not share a table.
RUNTIME_SETTINGS = ("batch_size", "retriever_url", "engine")
# Settings a results file written before they existed lacks, with the value it was made under.
LEGACY_SETTINGS = {"answer_rule": "tag"}


def search_tool_options(rollout: RolloutConfig) -> dict[str, Any] | None:
    """The options (``url``, ``topk``, ...) of the first search tool in ``rollout.tools`` (``SearchTool``
    or a subclass: ``backends.is_search_tool``); None without one."""
    for tool in rollout.tools:
        if is_search_tool(tool):
            return dict(tool.options)
    return None


def _from_rollout(name: str) -> Any:
    """A read-only view of ``rollout.<name>``: the value is declared once, in ``RolloutConfig``."""
    return property(lambda self: getattr(self.rollout, name), doc=f"``rollout.{name}``")


@dataclass(frozen=True)
class EvalSettings:
    """Decoding, budgets and retrieval of an evaluation (recorded beside the numbers).

    ``rollout`` is a training config's rollout section, whole: turns, tokens a turn,
    observation length, schedule, temperature / top-p / top-k (readable here by those names
    too). The other fields are the evaluation's own. :meth:`from_experiment` makes the
    settings that evaluate what a config trains, and :meth:`with_overrides` changes fields
    of either kind by name. The defaults are the default experiment's:
    ``EvalSettings() == EvalSettings.from_experiment(ExperimentConfig())``.

    Greedy by default, as the trainer's validation and the Search-R1 evaluation.
    ``max_tokens_per_turn`` caps each generation; ``max_response_length`` caps all turns
    plus observations of one answer. ``batch_size`` questions are rolled out (and written to
    disk) at a time. ``answer_rule`` (one of ``extraction.ANSWER_RULES``) picks what a record
    scores: the accepted ``<answer>`` tag only (``tag``) or, failing one, a short answer
    read from the last model turn (``tag-or-first-line``, the fair baseline protocol).
    """

    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    topk: int = 3  # the search tool's default
    greedy: bool = True
    seed: int = 0
    max_prompt_length: int = DataConfig.max_prompt_length
    max_response_length: int = DataConfig.max_response_length
    batch_size: int = DataConfig.val_batch_size
    retriever_timeout_s: float = 30.0
    answer_rule: str = "tag"

    max_turns = _from_rollout("max_turns")
    max_tokens_per_turn = _from_rollout("max_tokens_per_turn")
    max_obs_length = _from_rollout("max_obs_length")
    schedule = _from_rollout("schedule")
    temperature = _from_rollout("temperature")
    top_p = _from_rollout("top_p")
    top_k = _from_rollout("top_k")

    def __post_init__(self) -> None:
        if not isinstance(self.rollout, RolloutConfig):
            raise TypeError(
                f"EvalSettings.rollout must be a RolloutConfig, got {type(self.rollout).__name__}"
            )
        check_answer_rule(self.answer_rule, "EvalSettings.answer_rule")
        for name in ("topk", "max_tokens_per_turn", "max_prompt_length", "max_response_length", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"EvalSettings.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_turns < 0:
            raise ValueError(f"EvalSettings.max_turns must be >= 0, got {self.max_turns}")
        if not self.greedy and self.temperature <= 0:
            raise ValueError(f"EvalSettings.temperature must be > 0 when sampling, got {self.temperature}")

    @classmethod
    def from_experiment(cls, cfg: ExperimentConfig, **overrides: Any) -> EvalSettings:
        """The evaluation of what ``cfg`` trains, then ``overrides`` by field name (:meth:`with_overrides`).

        A copy of ``cfg.actor.rollout``; the data's prompt and response budgets; the
        validation's batch size and decoding (``rollout.val_greedy``); the experiment's seed;
        the ``topk`` and ``timeout_s`` of its search tool where its options set them.
        """
        rollout = copy.deepcopy(cfg.actor.rollout)
        search = search_tool_options(rollout) or {}
        tool = {"topk": int(search["topk"])} if "topk" in search else {}
        if "timeout_s" in search:
            tool["retriever_timeout_s"] = float(search["timeout_s"])
        settings = cls(
            rollout=rollout,
            greedy=rollout.val_greedy,
            seed=cfg.seed,
            max_prompt_length=cfg.data.max_prompt_length,
            max_response_length=cfg.data.max_response_length,
            batch_size=cfg.data.val_batch_size,
            **tool,
        )
        return settings.with_overrides(**overrides)

    def with_overrides(self, **changes: Any) -> EvalSettings:
        """These settings with ``changes``, each naming a field of the evaluation's or of ``rollout``'s."""
        own = {f.name for f in fields(self)}
        of_rollout = {f.name for f in fields(RolloutConfig)}
        unknown = sorted(set(changes) - own - of_rollout)
        if unknown:
            raise ValueError(
                f"EvalSettings: no field named {', '.join(map(repr, unknown))}; the evaluation's are "
                f"{sorted(own)} and the rollout's (RolloutConfig) {sorted(of_rollout)}"
            )
        mine = {k: v for k, v in changes.items() if k in own}
        rollout = replace(
            mine.pop("rollout", self.rollout), **{k: changes[k] for k in changes if k in of_rollout}
        )
        return replace(self, rollout=rollout, **mine)

    def sampling(self) -> SamplingParams:
        return rollout_sampling(self.rollout, greedy=self.greedy, seed=None if self.greedy else self.seed)

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
        retriever_url: the retriever's ``/retrieve`` URL (rag, and agent with a search tool).
        out_dir: where ``predictions.jsonl`` / ``metrics.json`` / ``metrics.md`` go; an
            existing ``predictions.jsonl`` with the same settings is resumed.
        engine, engine_kwargs: which engine to build for a path (``hf`` | ``vllm``) and its
            options (``max_batch_size``, ``dtype``, ...).
        model_name, corpus: labels recorded in the settings (default: the model's path;
            the corpus is what the retriever indexed).
    """
    settings = settings or EvalSettings()
    specs = _dataset_specs(mode, datasets)
    retriever = mode_retriever(mode, settings.rollout.tools, retriever_url, corpus)
    data = load_all(specs)  # before the model: a bad data file or tool fails in seconds
    tools = _tools(mode, settings, retriever_url)

    eng, tokenizer, default_name, owned = open_engine(model, tokenizer, engine, dict(engine_kwargs or {}))
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
    store, records = _resumed(out, header)
    resumed, done = len(records), store.done if store else set()
    pending = [q for qs in data.values() for q in qs if (q.dataset, q.id) not in done]
    total = sum(len(qs) for qs in data.values())
    manager = _manager(eng, tokenizer, mode, settings, tools)
    start = time.perf_counter()
    initial = total - len(pending)
    bar = tqdm(
        total=total, initial=initial, desc=f"eval {mode}", unit="q", disable=not progress, dynamic_ncols=True
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
    summary = aggregate(records, tools=tool_names(tools))
    results = EvalResults(header, summary, records, out, time.perf_counter() - start, resumed)
    if out:
        results.write(out)
    return results


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
