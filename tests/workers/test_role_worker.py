"""Every role's worker is built one way: ``cls(section, context, rank, world_size, port, addr)``."""

from __future__ import annotations

import pytest

from agentrl.config.schema import RewardConfig
from agentrl.workers.base import RoleWorker, RunContext
from agentrl.workers.reward import RuleRewardWorker

CONTEXT = RunContext(seed=0, device="cpu", total_steps=1, max_prompt_length=8, max_response_length=8)


def test_a_role_is_placed_in_its_group_before_it_builds_itself_from_its_section():
    seen = {}

    class Probe(RoleWorker):
        def _setup(self, section: str) -> None:
            seen.update(section=section, rank=self.rank, world_size=self.world_size, device=self.device.type)

    Probe("my section", CONTEXT, 0, 1, None, None)  # the worker group's call, positionally
    assert seen == {"section": "my section", "rank": 0, "world_size": 1, "device": "cpu"}


def test_a_role_worker_reads_its_own_section():
    section = RewardConfig()
    assert RuleRewardWorker(section, CONTEXT).reward is section


def test_a_role_that_does_not_say_how_to_build_itself_is_refused_by_name():
    class Nameless(RoleWorker):
        pass

    with pytest.raises(NotImplementedError, match="Nameless builds itself from its section in _setup"):
        Nameless(None, CONTEXT)


def test_a_run_context_without_a_checked_tool_identity_takes_the_configs_tool_format():
    from agentrl.config.schema import ExperimentConfig
    from agentrl.tool_identity import HERMES, TAGS, ToolIdentity

    config = ExperimentConfig()
    assert RunContext.from_config(config).tools == ToolIdentity(("search",), ("search",), TAGS)
    config.actor.rollout.tool_format = "hermes"
    assert RunContext.from_config(config).tools.format is HERMES
    checked = ToolIdentity(("search", "lk"), ("search", "lookup"), HERMES)
    assert RunContext.from_config(config, checked).tools is checked
