"""Command line of the evaluation harness (``python -m agentrl.eval`` / ``train_scripts/evaluate.sh``).

    python -m agentrl.eval --model runs/x/checkpoints/step_100 \\
        --data nq=DATA_DIR/nq/test.jsonl --data hotpotqa=DATA_DIR/hotpotqa/dev.jsonl \\
        --require hotpotqa=all_supporting_in_corpus --limit 200 \\
        --mode direct rag agent --retriever-url http://127.0.0.1:8000/retrieve --out runs/x/eval

Each mode writes ``OUT/<mode>/{predictions.jsonl,metrics.json,metrics.md}``; ``OUT/summary.md``
holds one table over all modes evaluated in this call. Re-running the same command
continues an interrupted evaluation.

``--answer-rule tag-or-first-line`` is the fair baseline protocol: a model that answers in
prose instead of an ``<answer>`` tag is scored on a short answer read from its last turn
(``agentrl.eval.extraction``), the same rule for every mode of the call.

``--config RUN/config.yaml`` evaluates the agent with the tools a run trained with (its
``actor.rollout.tools`` and how they are called, :data:`TOOL_FIELDS`); without it the agent
has the default search tool. Search tools ask ``--retriever-url`` with ``--topk``.

``--judge URL`` also scores every prediction with an LLM judge behind an OpenAI-compatible
endpoint (``--judge-model``, ``--judge-mode``, ``--judge-cache``; ``agentrl.eval.judged``): each
record gets ``judged`` and the tables a ``judged`` column with its interval beside EM.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl.config.errors import report_error
from agentrl.config.loader import ConfigError, load_rollout
from agentrl.config.schema import JudgeConfig
from agentrl.data.qa import QADataError
from agentrl.eval.backends import EvalModel
from agentrl.eval.datasets import DatasetSpec, parse_dataset_arg
from agentrl.eval.extraction import ANSWER_RULES
from agentrl.eval.harness import evaluate
from agentrl.eval.judged import make_judge
from agentrl.eval.prompts import MODES
from agentrl.eval.report import markdown_table
from agentrl.eval.settings import EvalSettings
from agentrl.rewards.judge import JUDGE_MODES

# Where the command line's defaults depart from the default experiment's (``EvalSettings()``):
# the Search-R1 evaluation's budgets it has always had, so a rerun of an older command measures
# the same thing (long prompts, for rag's documents; 512-token observations; lockstep turns).
CLI_DEFAULTS = {"max_prompt_length": 2048, "max_obs_length": 512, "schedule": "lockstep", "batch_size": 32}
# What --config takes from a training config's rollout: the tools and how the policy calls them.
TOOL_FIELDS = (
    "tools",
    "tool_format",
    "chat_template",
    "keep_thinking",
    "enable_thinking",
    "max_calls_per_turn",
    "max_calls_per_trajectory",
)


def build_parser() -> argparse.ArgumentParser:
    d = EvalSettings().with_overrides(**CLI_DEFAULTS)
    p = argparse.ArgumentParser(
        prog="python -m agentrl.eval",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", required=True, help="model directory or checkpoint dir (step_N with actor/)")
    p.add_argument(
        "--data",
        action="append",
        required=True,
        metavar="NAME=PATH",
        help="QA file (question jsonl or training rows parquet/jsonl); repeat for several",
    )
    p.add_argument(
        "--require",
        action="append",
        default=[],
        metavar="NAME=FIELD",
        help="keep only rows of dataset NAME whose FIELD is truthy; repeatable",
    )
    p.add_argument("--mode", nargs="+", default=list(MODES), choices=MODES)
    p.add_argument("--retriever-url", default=None, help="the retriever's /retrieve endpoint (rag, agent)")
    p.add_argument("--corpus", default=None, help="label of the retriever's corpus, recorded in the results")
    p.add_argument("--out", required=True, help="output directory (resumed if it holds the same evaluation)")
    p.add_argument(
        "--config",
        default=None,
        metavar="YAML",
        help="a training config (a run's config.yaml): the agent gets its tools and tool-call format "
        "(default: the search tool)",
    )
    p.add_argument("--limit", type=int, default=None, help="seeded sample of this many questions per dataset")
    p.add_argument("--seed", type=int, default=0, help="seed of the --limit sample (and of sampling)")
    p.add_argument("--topk", type=int, default=d.topk)
    p.add_argument("--max-turns", type=int, default=d.max_turns, help="searches allowed in agent mode")
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=float, default=d.temperature)
    p.add_argument("--top-p", type=float, default=d.top_p)
    p.add_argument("--top-k", type=int, default=d.top_k)
    p.add_argument("--max-tokens-per-turn", type=int, default=d.max_tokens_per_turn)
    p.add_argument("--max-prompt-length", type=int, default=d.max_prompt_length)
    p.add_argument("--max-response-length", type=int, default=d.max_response_length)
    p.add_argument("--max-obs-length", type=int, default=d.max_obs_length)
    p.add_argument("--schedule", default=d.schedule, choices=["lockstep", "concurrent"])
    p.add_argument(
        "--batch-size", type=int, default=d.batch_size, help="questions per rollout call and per flush"
    )
    p.add_argument(
        "--answer-rule",
        default=d.answer_rule,
        choices=ANSWER_RULES,
        help="what a record scores: the accepted <answer> tag only, or failing one the first line of the "
        "last model turn (the fair baseline protocol; see agentrl/eval/extraction.py)",
    )
    _add_judge_flags(p)
    p.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    p.add_argument("--dtype", default="auto", help="model dtype for the engine (auto, float32, bfloat16)")
    p.add_argument("--max-batch-size", type=int, default=64, help="engine batch cap")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (1 is faster than 2 on a machine shared with other jobs)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def _add_judge_flags(p: argparse.ArgumentParser) -> None:
    """``--judge`` and its settings; the defaults are ``JudgeConfig``'s (``reward.judge``)."""
    judge = JudgeConfig()
    p.add_argument(
        "--judge",
        default=None,
        metavar="URL",
        help="an LLM judge's OpenAI-compatible base URL (POSTed at /v1/chat/completions): every "
        "prediction is judged too, as the records' 'judged' and a column with its interval",
    )
    p.add_argument("--judge-model", default=judge.model, help="the judge requests' model")
    p.add_argument(
        "--judge-mode",
        default=judge.mode,
        choices=JUDGE_MODES,
        help="the judge's prompt: a verdict per answer, or a score in [0, 1] (each question has one answer)",
    )
    p.add_argument(
        "--judge-cache", default=None, metavar="DIR", help="reuse judged requests from this directory"
    )


def _specs(args: argparse.Namespace) -> list[DatasetSpec]:
    names = dict(parse_dataset_arg(x) for x in args.data)
    require: dict[str, list[str]] = {}
    for item in args.require:
        name, sep, fieldname = item.partition("=")
        if not sep or not fieldname:
            raise SystemExit(f"--require {item!r}: expected NAME=FIELD")
        if name not in names:
            raise SystemExit(f"--require {item!r}: no --data named {name!r} (have {sorted(names)})")
        require.setdefault(name, []).append(fieldname)
    return [DatasetSpec(n, p, tuple(require.get(n, ())), args.limit, args.seed) for n, p in names.items()]


def tool_settings(path: str | Path) -> dict[str, Any]:
    """The :data:`TOOL_FIELDS` of the rollout section of the training config at ``path``
    (``load_rollout``: the run's data files and model need not exist here)."""
    try:
        rollout = load_rollout(path)
    except ConfigError as exc:
        raise SystemExit(f"--config: {exc}") from None
    return {name: getattr(rollout, name) for name in TOOL_FIELDS}


def settings_from_args(args: argparse.Namespace) -> EvalSettings:
    """The evaluation settings the flags name, each flag overriding its field of ``EvalSettings()``;
    with ``--config``, the tools of that training config (:func:`tool_settings`)."""
    tools = tool_settings(args.config) if args.config else {}
    return EvalSettings().with_overrides(
        topk=args.topk,
        max_turns=args.max_turns,
        greedy=not args.sample,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        max_tokens_per_turn=args.max_tokens_per_turn,
        max_prompt_length=args.max_prompt_length,
        max_response_length=args.max_response_length,
        max_obs_length=args.max_obs_length,
        schedule=args.schedule,
        batch_size=args.batch_size,
        answer_rule=args.answer_rule,
        **tools,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    try:
        settings = settings_from_args(args)
        specs = _specs(args)
        judge = (
            make_judge(args.judge, args.judge_model, args.judge_mode, args.judge_cache)
            if args.judge is not None
            else None
        )
    except ValueError as error:  # a flag's value
        return report_error(error, 2)
    model = EvalModel(
        args.model,
        engine=args.engine,
        engine_kwargs={"max_batch_size": args.max_batch_size, "dtype": args.dtype},
    )
    out = Path(args.out)
    rows = []
    for mode in args.mode:
        try:
            results = evaluate(
                model,
                specs,
                mode,
                args.retriever_url,
                settings=settings,
                out_dir=out / mode,
                corpus=args.corpus,
                progress=not args.no_progress,
                judge=judge,
            )
        except (QADataError, FileNotFoundError) as error:  # a data file, the model directory
            return report_error(error, 2)
        rows.extend(results.table_rows())
        print(
            f"[{mode}] {json.dumps(results.metrics)} ({results.seconds:.0f} s, {results.resumed} resumed)",
            file=sys.stderr,
        )
        if judge is not None:  # its fallbacks and failures say how far to trust the judged column
            print(f"[{mode}] {json.dumps(judge.metrics(reset=True))}", file=sys.stderr)
    table = markdown_table(rows, ["dataset", "mode", "retriever"])
    judged = f", judge: `{args.judge_model}` at {args.judge}" if judge is not None else ""
    (out / "summary.md").write_text(
        f"model: `{args.model}`, answer rule: `{args.answer_rule}`{judged}\n\n{table}", encoding="utf-8"
    )
    print(table)
    return 0
