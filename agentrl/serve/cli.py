"""The serving command: parse the flags, build engine, format and tools, serve until stopped.

    python -m agentrl.serve --model CHECKPOINT --config RUN_DIR/config.yaml \
        --execute-tools --retriever-url http://127.0.0.1:8000/retrieve --port 8001

``--config`` is the run's saved config: its ``actor.rollout`` gives the tool-call format, the
chat template, the tools and the budgets, and its ``data`` the prompt and response lengths.
Without it the model's own chat template renders ``hermes`` calls and there are no tools.
``--execute-tools`` answers each request with the whole agent loop on the server
(``tool_loop.py``); without it a request gets one turn, its calls as ``tool_calls`` for the
client to run. The server prints its URL once it listens and stops on SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl.agent import LLMGenerationManager
from agentrl.agent.formats import build_format
from agentrl.agent.generation import checked_tools
from agentrl.agent.sampling import rollout_sampling
from agentrl.config import ConfigError, load_config
from agentrl.config.errors import report_error
from agentrl.config.schema import ExperimentConfig, RolloutConfig
from agentrl.endpoint.episode import Budget
from agentrl.endpoint.server import ChatEndpoint
from agentrl.eval.backends import agent_tools, open_engine
from agentrl.serve.tool_loop import ToolLoop
from agentrl.tools.registry import build_tools


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m agentrl.serve",
        description="Serve a checkpoint on an OpenAI-compatible /v1/chat/completions endpoint.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", required=True, help="model directory or checkpoint dir (step_N with actor/)")
    p.add_argument("--config", default=None, help="the run's saved config.yaml (format, tools, budgets)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--name", default=None, help="the model name /v1/models lists (default: the path)")
    p.add_argument("--execute-tools", action="store_true", help="run the tools here: one request, one answer")
    p.add_argument("--retriever-url", default=None, help="the search tools ask this retriever instead")
    p.add_argument("--topk", type=int, default=3, help="passages a search returns (with --retriever-url)")
    p.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    p.add_argument("--dtype", default="auto", help="model dtype for the engine (auto, float32, bfloat16)")
    p.add_argument("--max-batch-size", type=int, default=32, help="engine batch cap")
    return p


def _experiment(args: argparse.Namespace) -> ExperimentConfig:
    if args.config is None:
        config = ExperimentConfig()
        config.actor.rollout = RolloutConfig(tool_format="hermes", tools=[])
        return config
    return load_config([Path(args.config)], [f"actor.model_path={args.model}"], check_files=False)


def _tools(rollout: RolloutConfig, args: argparse.Namespace) -> Any:
    """The run's tools as training built them; search tools pointed at ``--retriever-url``."""
    if args.retriever_url:
        return agent_tools(rollout.tools, args.retriever_url, args.topk, timeout_s=30.0)
    return build_tools(rollout.tools)


async def serve(args: argparse.Namespace) -> None:
    """Serve until SIGINT or SIGTERM (or until the task is cancelled)."""
    config = _experiment(args)
    rollout, data = config.actor.rollout, config.data
    engine, tokenizer, name, owned = open_engine(
        args.model, None, args.engine, {"max_batch_size": args.max_batch_size, "dtype": args.dtype}
    )
    tools, typed = checked_tools(_tools(rollout, args))
    specs = [t.spec for t in typed]
    fmt = build_format(rollout, tokenizer, specs, tags={t.name: t.tag for t in typed})
    budget = Budget(data.max_prompt_length, data.max_response_length, rollout.max_obs_length)
    loop = None
    if args.execute_tools:
        lengths = {
            "max_prompt_length": data.max_prompt_length,
            "max_response_length": data.max_response_length,
        }
        manager = LLMGenerationManager(engine, tokenizer, rollout, tools=tools, **lengths)
        manager.close_tools_after_run = False  # the requests share the tools' sessions; closed at the end
        loop = ToolLoop(manager).reply
    base = rollout_sampling(rollout)
    endpoint = ChatEndpoint(engine, fmt, tokenizer, budget, base, model=args.name or name, infer=loop)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    url = await endpoint.start(args.host, args.port)
    names = ", ".join(t.name for t in typed) or "none"
    here = ", run here" if args.execute_tools else ""
    print(f"serving {endpoint.model} at {url}/v1 (tools: {names}{here})", flush=True)
    try:
        await stop.wait()
    finally:
        await endpoint.stop()
        if loop is not None:
            await manager.close_tools()
        if owned:
            engine.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        asyncio.run(serve(args))
    except (ConfigError, FileNotFoundError, ValueError) as error:  # a flag, the config, the model
        return report_error(error, 2)
    return 0
