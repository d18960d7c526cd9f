"""What each lever does to the two-tool warm start's arithmetic, with the policy forced onto the oracle path.

    python -m benchmarks.two_tool_levers [--out runs/two_tool_levers] [--levers base sequential ...]
        [--seed 0] [--skill-only]

For each lever (a change to ``--profile two_tool``, :data:`LEVERS`): the quickstart's world, index,
tiny model and demonstrations with that profile, then SFT; with ``--skill-only`` its first stage
alone (the oracle demonstrations: the path the policy is forced onto, as the diagnosis in
``docs/quickstart.md`` measured it), else both stages (the warm start PPO starts from). Then a
greedy evaluation of every held-out question with the profile's PPO rollout settings. Figures:
arithmetic EM, single- and two-hop EM; of the held-out arithmetic questions, how many called
``calculate`` at all, and in how many the call's first number, its second number and both were
the two passages' ages (its ``expression`` against the question's ``calculation``); the
demonstrations trained on and the SFT wall time. Each lever's figures are kept in
``<out>/<lever>_<skill|warm>_seed<S>.json`` (a lever already measured is not run again, so an
interrupted run resumes).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

# name -> (what it changes, Profile fields replaced; ``world`` and ``ppo`` merged into the profile's)
LEVERS: dict[str, tuple[str, dict[str, Any]]] = {
    "base": ("the two_tool profile as it ships", {}),
    "sequential": (
        "one search a turn, each age restated after its passage (2 tool turns: every such demo is cut)",
        {"sft_parallel_searches": False},
    ),
    "sequential_turns3": (
        "one search a turn, with 3 tool turns allowed (actor.rollout.max_turns=3) so the demonstrations fit",
        {"sft_parallel_searches": False, "ppo": {"actor.rollout.max_turns": 3}},
    ),
    "practice3": (
        "3 more training-only arithmetic questions per entity (none on a held-out entity), all demonstrated",
        {"world": {"arithmetic_practice": 3}, "sft_arithmetic": 10_000},
    ),
    "practice3_steps900": (
        "practice3 with 900 skill steps instead of 560",
        {"world": {"arithmetic_practice": 3}, "sft_arithmetic": 10_000, "sft_skill_steps": 900},
    ),
    "layers3": ("3 layers instead of 2", {"layers": 3}),
    "restate": (
        "each age restated as its passage's own sentence before calculate ('Rildam is 53 years old.')",
        {"sft_restate_ages": True},
    ),
}
_CALL = re.compile(r'"expression":\s*"\s*(-?\d+)\s*-\s*(-?\d+)\s*"')


def lever_profile(base: Any, changes: Mapping[str, Any]) -> Any:
    """``base`` with ``changes`` applied (``world`` and ``ppo`` merged key by key into the base's)."""
    fields = dict(changes)
    for merged in ("world", "ppo"):
        if merged in fields:
            fields[merged] = getattr(base, merged) | fields[merged]
    return replace(base, **fields)


def read_ages(records: Sequence[Mapping[str, Any]], calculation: Mapping[str, str]) -> dict[str, int]:
    """Of the records of arithmetic questions (``calculation``: question id -> its expression
    "A - B"), how many called calculate with a subtraction, and in how many its first number,
    its second and both were A and B."""
    counts = {"questions": 0, "calls": 0, "first_right": 0, "second_right": 0, "both_right": 0}
    for record in records:
        expected = calculation.get(str(record["id"]))
        if expected is None:
            continue
        counts["questions"] += 1
        match = _CALL.search(str(record["response"]))
        if match is None:
            continue
        want = [int(x) for x in expected.split(" - ")]
        got = [int(match.group(1)), int(match.group(2))]
        counts["calls"] += 1
        counts["first_right"] += got[0] == want[0]
        counts["second_right"] += got[1] == want[1]
        counts["both_right"] += got == want
    return counts


def measure_lever(name: str, run_dir: Path, seed: int, skill_only: bool) -> dict[str, Any]:
    """One lever's figures (module docstring), its phases' files in ``run_dir``; the retriever is
    stopped whatever happens."""
    from agentrl.config import load_config
    from agentrl.quickstart.dialects import dialect_of
    from agentrl.quickstart.evaluation import evaluate_records, summarize
    from agentrl.quickstart.phases import (
        build_index,
        build_model,
        make_world,
        ppo_overrides,
        record_sft_data,
        start_retriever,
        train_sft,
    )
    from agentrl.quickstart.pipeline import prepare
    from agentrl.quickstart.profiles import TWO_TOOL
    from retriever.process import RetrieverProcess

    what, changes = LEVERS[name]
    profile = lever_profile(TWO_TOOL, changes)
    if skill_only:
        profile = replace(profile, sft_habit_steps=0)
    dialect = dialect_of(
        profile.tool_format, profile.calculator, profile.sft_parallel_searches, profile.sft_restate_ages
    )
    run_dir = prepare(run_dir)
    world, files = make_world(run_dir, profile, seed, dialect)
    model_dir = build_model(world, profile, run_dir, seed, dialect)
    server = RetrieverProcess(build_index(files.corpus, run_dir), log_path=run_dir / "retriever.log")
    config = load_config(
        "ppo", ppo_overrides(profile, run_dir, model_dir, files, server.retrieve_url, [], seed, dialect)
    )
    try:
        start_retriever(server)
        demos = record_sft_data(world, model_dir, config, profile, run_dir, seed, dialect)
        start = time.perf_counter()
        sft = train_sft(model_dir, demos, profile, run_dir, seed)
        sft_s = time.perf_counter() - start
        start = time.perf_counter()
        records = evaluate_records(sft.model_dir, files.test, config, None, seed)
        eval_s = time.perf_counter() - start
    finally:
        server.stop()
    summary = summarize(records, ("search", "calculate"))
    calculation = {q.id: q.calculation for q in world.test_questions if q.calculation is not None}
    return {
        "lever": name,
        "what": what,
        "changes": changes,
        "skill_only": skill_only,
        "seed": seed,
        "oracle_demos": demos.oracle,
        "shortcut_demos": demos.shortcut,
        "train_arithmetic": sum(q.calculation is not None for q in world.train_questions),
        "sft_s": round(sft_s, 1),
        "eval_s": round(eval_s, 1),
        "ages": read_ages(records, calculation),
        "em": {kind: round(s["em"], 4) for kind, s in summary.items()},
        "n": {kind: int(s["n"]) for kind, s in summary.items()},
        "calls_per_question": {
            kind: {t: round(s[f"calls/{t}"], 3) for t in ("search", "calculate")}
            for kind, s in summary.items()
        },
    }


def table(results: Sequence[Mapping[str, Any]]) -> str:
    """The figures as a markdown table, one lever a row."""
    head = (
        "| lever | arithmetic right | calculate called | 1st age right | 2nd age right | both right "
        "| single-hop EM | two-hop EM | SFT s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    rows = []
    for r in results:
        a, n = r["ages"], r["n"]["arithmetic"]
        right = round(r["em"]["arithmetic"] * n)
        rows.append(
            f"| {r['lever']} | {right} / {n} | {a['calls']} | {a['first_right']} | {a['second_right']} "
            f"| {a['both_right']} | {r['em']['hop1']:.3f} | {r['em']['hop2']:.3f} | {r['sft_s']:.0f} |"
        )
    return "\n".join([head, *rows])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("runs/two_tool_levers"))
    parser.add_argument("--levers", nargs="+", default=["base"], choices=sorted(LEVERS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skill-only", action="store_true", help="SFT stage 1 alone (the oracle path)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    stage = "skill" if args.skill_only else "warm"
    results = []
    for name in args.levers:
        run = f"{name}_{stage}_seed{args.seed}"
        path = args.out / f"{run}.json"
        if not path.exists():
            print(f"== lever {name}: {LEVERS[name][0]}", flush=True)
            figures = measure_lever(name, args.out / run, args.seed, args.skill_only)
            path.write_text(json.dumps(figures, indent=1))
        results.append(json.loads(path.read_text()))
        print(json.dumps(results[-1]), flush=True)
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
