#!/usr/bin/env python
"""Convert a QA jsonl file into Search-R1-style training rows (parquet or jsonl).

    python data/prepare_qa.py --input DATA_DIR/nq/test.jsonl --source nq \\
        --split test --out runs/data/nq_test.parquet [--limit 500 --seed 0]

Input lines: {"id", "question", "golden_answers": [str, ...], ...}. A bad line stops the
conversion with the file, the line number and the field. The logic lives in
agentrl.data.qa so the trainer and evaluation use the same template and schema.

The prompt's instruction names the tools the policy will have (agentrl.data.instruction):
by default the search tool; ``--tool CLASS_PATH`` (repeatable, in the config's order) or
``--config RUN.yaml`` (its actor.rollout.tools and tool_format, options included) name
others, e.g. ``--tool agentrl.tools.retrieval.SearchTool --tool my_tools.LookupTool``.
With ``--tokenizer``, prompts longer than ``--max-prompt-length`` tokens are counted and the
first ids named: the trainer would leave them out (data.max_prompt_length).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentrl.config.loader import ConfigError, load_rollout
from agentrl.config.schema import DataConfig, ToolConfig
from agentrl.data.instruction import instruction_template, tool_prompt
from agentrl.data.qa import QADataError, read_question_records, sample_records, to_training_rows, write_rows


def instruction_of(tools: list[ToolConfig], tool_format: str) -> str:
    """The instruction for ``tools``, each built by the tool registry as the rollout builds it."""
    from agentrl.tools import as_typed
    from agentrl.tools.registry import build_toolset

    built = [tool for config in tools for tool in build_toolset(config)]  # a tool set: its tools
    return instruction_template([tool_prompt(as_typed(tool)) for tool in built], tool_format)


def overlong(rows: list[dict[str, Any]], tokenizer_path: str, max_prompt_length: int) -> list[str]:
    """Ids of the rows whose prompt is longer than ``max_prompt_length`` tokens, as the trainer
    tokenizes it (through the chat template when there is one)."""
    from agentrl.agent.prompts import encode_messages
    from agentrl.models.loading import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_path)
    return [str(r["id"]) for r in rows if len(encode_messages(tokenizer, r["prompt"])) > max_prompt_length]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="question jsonl")
    ap.add_argument(
        "--source", default=None, help="data_source of every row (default: each record's 'dataset')"
    )
    ap.add_argument("--split", required=True, help="value of extra_info.split, e.g. train or test")
    ap.add_argument("--out", required=True, help="output .parquet or .jsonl")
    ap.add_argument("--limit", type=int, default=None, help="keep a seeded random sample of this many rows")
    ap.add_argument("--seed", type=int, default=0, help="seed of the --limit sample")
    tools = ap.add_mutually_exclusive_group()
    tools.add_argument(
        "--tool",
        action="append",
        metavar="CLASS_PATH",
        help="a tool the policy has; repeat (default: search)",
    )
    tools.add_argument("--config", metavar="YAML", help="take the tools and tool_format of this config")
    ap.add_argument("--tool-format", choices=["tags", "hermes"], default=None, help="default: tags")
    ap.add_argument("--tokenizer", default=None, help="model dir: report prompts over --max-prompt-length")
    ap.add_argument("--max-prompt-length", type=int, default=DataConfig.max_prompt_length)
    args = ap.parse_args(argv)
    try:
        if args.config:
            rollout = load_rollout(args.config)
            configs, tool_format = list(rollout.tools), args.tool_format or rollout.tool_format
        else:
            configs = [ToolConfig(path) for path in args.tool or [ToolConfig.class_path]]
            tool_format = args.tool_format or "tags"
        # the input is checked first: building the tools imports the rollout (and torch)
        records = sample_records(read_question_records(args.input), args.limit, args.seed)
        instruction = instruction_of(configs, tool_format)
        rows = to_training_rows(records, args.split, args.source, instruction)
        path = write_rows(rows, args.out)
    except (QADataError, ConfigError, ImportError, TypeError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(records)} rows to {path}")
    if args.tokenizer:
        long_ids = overlong(rows, args.tokenizer, args.max_prompt_length)
        if long_ids:
            print(
                f"warning: {len(long_ids)} of {len(rows)} prompts are longer than {args.max_prompt_length} "
                f"tokens (first ids: {', '.join(long_ids[:5])}); training with data.max_prompt_length="
                f"{args.max_prompt_length} leaves them out",
                file=sys.stderr,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
