"""The keys of what a run plugs in (``reward.judge``, ``actor.rollout.agent``): set from the command
line, checked by name."""

import pytest

from agentrl.config import ConfigError, load_config


def test_the_judges_numbers_are_checked_and_each_error_names_its_key(tmp_path):
    model = [f"actor.model_path={tmp_path}"]
    cfg = load_config("ppo", [*model, "reward.judge.url=http://127.0.0.1:8000", "reward.judge.mode=group"])
    assert cfg.reward.judge.url == "http://127.0.0.1:8000" and cfg.reward.judge.mode == "group"
    with pytest.raises(ConfigError) as error:
        load_config("ppo", [*model, "reward.judge.timeout_s=0", "reward.judge.max_concurrency=0"])
    assert "config key 'reward.judge.timeout_s' must be > 0 seconds, got 0" in str(error.value)
    assert "config key 'reward.judge.max_concurrency' must be >= 1, got 0" in str(error.value)
    with pytest.raises(
        ConfigError, match=r"'reward\.judge\.on_failure' must be one of \['fallback', 'raise'\]"
    ):
        load_config("ppo", [*model, "reward.judge.on_failure=retry"])


def test_an_agent_entry_needs_a_chat_template_format_and_no_context_policy_each_error_naming_its_key(
    tmp_path,
):
    model = [f"actor.model_path={tmp_path}"]
    agent = "actor.rollout.agent.entry=my_pkg.agent:run"
    cfg = load_config(
        "ppo", [*model, agent, "actor.rollout.tool_format=hermes", "actor.rollout.chat_template=hermes"]
    )
    assert cfg.actor.rollout.agent.entry == "my_pkg.agent:run"
    with pytest.raises(ConfigError) as error:
        load_config(
            "ppo",
            [*model, agent, "actor.rollout.context.policy=keep_last", "actor.rollout.agent.timeout_s=0"],
        )
    said = str(error.value)
    assert "'actor.rollout.agent.entry' needs a chat-template tool format" in said
    assert "'actor.rollout.context.policy' must be none with actor.rollout.agent.entry" in said
    assert "'actor.rollout.agent.timeout_s' must be > 0, got 0" in said
