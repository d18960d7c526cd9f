"""Checks of what a run plugs in from outside: an LLM judge (``reward.judge``) and an agent function
(``actor.rollout.agent``); each error names its key and what was expected."""

from __future__ import annotations

from agentrl.config.schema import ExperimentConfig


def check_plugins(cfg: ExperimentConfig, problems: list[str]) -> None:
    _check_judge(cfg, problems)
    _check_agent(cfg, problems)


def _check_judge(cfg: ExperimentConfig, problems: list[str]) -> None:
    """The LLM judge's numbers, checked whether or not a url is set (a preset may set it later)."""
    judge = cfg.reward.judge
    floors = {
        "max_concurrency": (judge.max_concurrency, 1),
        "max_tokens": (judge.max_tokens, 1),
        "retries": (judge.retries, 0),
        "backoff_s": (judge.backoff_s, 0),
        "price_in_per_mtok": (judge.price_in_per_mtok, 0),
        "price_out_per_mtok": (judge.price_out_per_mtok, 0),
    }
    problems += [
        f"config key 'reward.judge.{key}' must be >= {floor}, got {value}"
        for key, (value, floor) in floors.items()
        if value < floor
    ]
    if not judge.timeout_s > 0:
        problems.append(f"config key 'reward.judge.timeout_s' must be > 0 seconds, got {judge.timeout_s}")
    if judge.url is not None and not judge.url.startswith(("http://", "https://")):
        problems.append(
            f"config key 'reward.judge.url' must be an http(s) base URL like 'http://host:8000' "
            f"or null, got '{judge.url}'"
        )


def _check_agent(cfg: ExperimentConfig, problems: list[str]) -> None:
    rollout = cfg.actor.rollout
    agent = rollout.agent
    if agent.timeout_s <= 0:
        problems.append(f"config key 'actor.rollout.agent.timeout_s' must be > 0, got {agent.timeout_s}")
    if agent.max_concurrent < 1:
        problems.append(
            f"config key 'actor.rollout.agent.max_concurrent' must be >= 1, got {agent.max_concurrent}"
        )
    if agent.entry is None:
        return
    if rollout.tool_format == "tags":
        problems.append(
            "config key 'actor.rollout.agent.entry' needs a chat-template tool format (the endpoint returns "
            "calls as tool_calls): set actor.rollout.tool_format to hermes or qwen3_coder, got tags"
        )
    if rollout.context.policy != "none":
        problems.append(
            "config key 'actor.rollout.context.policy' must be none with actor.rollout.agent.entry: an agent "
            f"manages its own context (its rewritten requests become steps), got {rollout.context.policy}"
        )
