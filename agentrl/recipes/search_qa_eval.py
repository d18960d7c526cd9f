"""The real-data recipe's evaluation: every model of the run on the held-out sets, one rule.

Cells (each one ``agentrl.eval.evaluate`` call, resumable, under ``OUT/eval/<cell>/``):

============  ==================  ===========  ==================================
cell          model               mode         retriever
============  ==================  ===========  ==================================
direct        starting model      direct       –
rag-bm25      starting model      rag          BM25 top-3
rag-dense     starting model      rag          dense top-3 (MiniLM + faiss)
sft           after SFT           agent        BM25 top-3
rl_full       after SFT + GRPO    agent        BM25 top-3
rl_lora       after SFT + GRPO    agent        BM25 top-3 (LoRA adapters, merged)
rl_dyn        after SFT + GRPO    agent        BM25 top-3 (dynamic sampling, no pool)
rl_turn       after SFT + GRPO    agent        BM25 top-3 (as rl_dyn, plus a reward per search hit)
============  ==================  ===========  ==================================

Every cell rolls out as the RL phases do (``EvalSettings.from_experiment`` of their GRPO
config: the same turns, tokens a turn, observation length, schedule, response budget, top-k,
greedy as their validation), but for the held-out protocol's named departures
(:data:`HELDOUT_PROTOCOL`), and scores its records with the answer rule
``tag-or-first-line`` (``agentrl.eval.extraction``). The results block, the RL gains and the
curves are read from the cells by ``agentrl.recipes.search_qa_report``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CELLS", "DATASETS", "HELDOUT_PROTOCOL", "eval_settings", "evaluate_cells"]

CELLS: dict[str, tuple[str, str, str | None]] = {  # cell -> (phase whose model, mode, backend)
    "direct": ("model", "direct", None),
    "rag-bm25": ("model", "rag", "bm25"),
    "rag-dense": ("model", "rag", "dense"),
    "sft": ("sft", "agent", "bm25"),
    "rl_full": ("rl_full", "agent", "bm25"),
    "rl_lora": ("rl_lora", "agent", "bm25"),
    "rl_dyn": ("rl_dyn", "agent", "bm25"),
    "rl_turn": ("rl_turn", "agent", "bm25"),
}
DATASETS = ("nq", "hotpotqa", "triviaqa", "popqa")


# Where the held-out evaluation departs from the RL rollout it evaluates; docs/results.md's
# table was measured so.
HELDOUT_PROTOCOL: dict[str, Any] = {
    # a rag prompt holds three documents: the RL prompt budget (data.max_prompt_length) would cut it
    "max_prompt_length": 2048,
    "batch_size": 125,  # questions a rollout call (the RL validation rolls out data.val_batch_size)
    "answer_rule": "tag-or-first-line",  # the fair baseline protocol: a prose answer is scored too
}


def eval_settings(config: Any, **overrides: Any) -> Any:
    """The settings of every cell: the RL rollout's (``EvalSettings.from_experiment`` of the RL
    phases' GRPO ``config``) under :data:`HELDOUT_PROTOCOL`, then ``overrides`` (field names)."""
    from agentrl.eval import EvalSettings

    return EvalSettings.from_experiment(config, **(HELDOUT_PROTOCOL | dict(overrides)))


def evaluate_cells(
    out: Path,
    models: Mapping[str, str],
    index: str,
    cells: Sequence[str],
    *,
    config: Any,
    engine: str = "vllm",
    settings_overrides: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Run (or resume) ``cells`` whose model exists in ``models`` (phase -> model dir), with
    :func:`eval_settings` of the RL ``config`` and ``settings_overrides``."""
    from agentrl.eval import DatasetSpec, EvalModel, evaluate
    from retriever.process import RetrieverProcess

    datasets = [
        DatasetSpec(name, str(out / "data" / f"heldout_{name}.jsonl"))
        for name in DATASETS
        if (out / "data" / f"heldout_{name}.jsonl").is_file()
    ]
    settings = eval_settings(config, **(settings_overrides or {}))
    servers: dict[str, Any] = {}
    done: dict[str, Path] = {}
    try:
        for cell in cells:
            phase, mode, backend = CELLS[cell]
            if phase not in models:
                print(f"[eval] {cell}: no model yet (phase {phase} not run)")
                continue
            url = None
            if backend is not None:
                if backend not in servers:
                    servers[backend] = RetrieverProcess(
                        index, extra_args=("--backend", backend), log_path=out / f"retriever-{backend}.log"
                    ).start()
                url = servers[backend].retrieve_url
            print(f"[eval] {cell}: {mode} with {models[phase]}", flush=True)
            model = EvalModel(
                models[phase],
                engine=engine,
                engine_kwargs={"max_batch_size": 128},
                name=f"{cell}:{Path(models[phase]).name}",
            )
            evaluate(
                model,
                datasets,
                mode,
                url,
                settings=settings,
                out_dir=out / "eval" / cell,
                corpus="wiki_mini" if backend else None,
            )
            done[cell] = out / "eval" / cell
    finally:
        for server in servers.values():
            server.stop()
    return done
