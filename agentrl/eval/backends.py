"""What an evaluation runs against: the model's engine (from a path, a module or an engine), the
agent's tools and the retriever.

``EvalModel`` names what is evaluated and how its engine is opened, and ``open_engine`` turns
it into an engine the evaluation can generate with;
``agent_tools`` builds the trained config's tools, its search tools pointed at the
evaluation's retriever; ``retriever_info`` checks that the retriever is up and reads what it
says about itself (``mode_retriever``: when the mode asks it); ``retrieve`` fetches the top-k
documents of a chunk of questions (the rag mode's prompts).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.config.schema import ToolConfig
from agentrl.engines import ENGINE_KINDS, build_engine
from agentrl.eval.datasets import EvalQuestion
from agentrl.importing import import_object
from agentrl.tools.registry import build_toolset
from agentrl.tools.retrieval.client import RetrieverClient, RetrieverError
from agentrl.tools.retrieval.search import SearchTool
from agentrl.tools.typed import as_typed

__all__ = [
    "EvalModel",
    "agent_tools",
    "is_search_tool",
    "mode_retriever",
    "open_engine",
    "resolve_model_dir",
    "retrieve",
    "retriever_info",
    "tool_names",
]


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


def open_engine(
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


@dataclass(frozen=True)
class EvalModel:
    """What an evaluation evaluates, and how its engine is opened (``open``).

    ``model``: a model directory or checkpoint (``step_N`` with ``actor/``), an ``nn.Module``
    (wrapped in the HF engine) or any ``Engine``. ``tokenizer``: required unless ``model`` is a
    path (then loaded from it). ``engine``, ``engine_kwargs``: the engine built for a path
    (``hf`` | ``vllm``) and its options (``max_batch_size``, ``dtype``, ...). ``name``: the label
    recorded in the settings (default: the model's path, or its class).
    """

    model: Any
    tokenizer: Any = None
    engine: str = "hf"
    engine_kwargs: Mapping[str, Any] = field(default_factory=dict)
    name: str | None = None

    def open(self) -> tuple[Any, Any, str, bool]:
        """``(engine, tokenizer, name, owned)`` (``open_engine``); ``owned``: the caller shuts it down."""
        engine, tokenizer, default_name, owned = open_engine(
            self.model, self.tokenizer, self.engine, dict(self.engine_kwargs)
        )
        return engine, tokenizer, self.name or default_name, owned

    def engine_label(self, engine: Any, owned: bool) -> str:
        """The engine recorded in the settings: the kind built, or the class of one given."""
        return self.engine if owned else type(engine).__name__


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


def mode_retriever(
    mode: str, tools: Sequence[ToolConfig], retriever_url: str | None, corpus: str | None
) -> dict[str, Any] | None:
    """``retriever_info`` and the ``corpus`` label when ``mode`` asks the retriever (rag, and agent
    with a search tool among ``tools``); None otherwise."""
    if mode == "direct" or (mode == "agent" and not any(map(is_search_tool, tools))):
        return None
    if not retriever_url:
        raise ValueError(f"mode {mode!r} needs retriever_url (the retriever's /retrieve endpoint)")
    return retriever_info(retriever_url) | {"corpus": corpus}


def retrieve(client: RetrieverClient, questions: Sequence[EvalQuestion], topk: int) -> list[list[dict]]:
    """The top-``topk`` documents of each question, in order (one request for the chunk)."""

    async def once() -> list[list[dict]]:
        try:
            return await client.retrieve([q.question for q in questions], topk)
        finally:
            await client.close()

    return asyncio.run(once())


def is_search_tool(config: ToolConfig) -> bool:
    """Whether ``config`` names ``SearchTool`` or a subclass: a tool that asks the retriever."""
    cls = import_object(config.class_path, "tool class_path")
    return isinstance(cls, type) and issubclass(cls, SearchTool)


def agent_tools(
    tools: Sequence[ToolConfig], retriever_url: str | None, topk: int, timeout_s: float
) -> list[Any]:
    """The agent mode's tools: ``tools`` (a trained config's ``actor.rollout.tools``) built by the
    registry, in order, as the rollout builds them (a tool set, e.g. an MCP server, gives each tool
    it lists), except that every search tool asks the evaluation's retriever (``url``) with its
    ``topk`` and ``timeout_s``; their other options stay as configured."""
    built = []
    for config in tools:
        options = dict(config.options or {})
        if is_search_tool(config):
            if not retriever_url:
                raise ValueError(f"tool {config.class_path!r} needs a retriever_url to ask")
            options |= {"url": retriever_url, "topk": topk, "timeout_s": timeout_s}
        built.extend(build_toolset(ToolConfig(config.class_path, options)))  # a tool set: its tools
    return built


def tool_names(tools: Sequence[Any]) -> list[str]:
    """The names of built tools, in order: the keys the rollout counts calls by in every tool-call
    format (``Trajectory.tool_calls``, ``tool_calls/<name>``; a tag tool's name is its tag)."""
    return [as_typed(tool).name for tool in tools]
