"""Every per-tool count is keyed by the tool's name, in both formats, whatever its tag.

A schema tool may declare a ``tag`` (the tags format's call syntax) other than its name; the
rollout counts calls by name, so the reward's ``tool_calls/<name>`` and the trainer's
``val/*/tool_calls/<name>`` must too, or the tool's counts silently read 0 under its tag.

Without Ray: the trainer is built from its config as ``fit`` builds it (the driver's tool check
included), and its sampler's ``generate`` (the call into the actor group) runs the real
``LLMGenerationManager`` in this process around a scripted policy: a random tiny model never
writes a tool call.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from support.dialects import DIALECTS, Dialect
from support.scripted_engine import ScriptedEngine

from agentrl.agent import LLMGenerationManager, collate
from agentrl.agent.sampling import rollout_sampling
from agentrl.config.schema import ExperimentConfig, RewardConfig, ToolConfig
from agentrl.trainer.ppo_trainer import PPOTrainer
from agentrl.trainer.step_sampler import StepSampler
from agentrl.workers.reward import RuleRewardWorker

pytestmark = pytest.mark.timeout(120)

TAGGED_LOOKUP = '''
from agentrl.tools import ToolResult, ToolSpec


class LookupTool:
    """A schema tool named ``lookup`` whose tag in the tags format is ``lk``."""

    spec = ToolSpec(
        "lookup",
        "Look a key up.",
        {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    )
    tag = "lk"
    timeout_s = 5.0

    async def call(self, arguments: list) -> list:
        return [ToolResult("Quenby") for _ in arguments]
'''


def rows_file(path: Path, questions: list[str]) -> str:
    rows = [
        {
            "id": f"q{i}",
            "data_source": "nq",
            "prompt": [{"role": "user", "content": question}],
            "reward_model": {"ground_truth": {"target": ["Quenby"]}},
        }
        for i, question in enumerate(questions)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def lookup_once(dialect: Dialect):
    """The policy: one ``lookup`` call (by its tag in ``tags``, its name in ``hermes``), then the answer."""
    tool = "lk" if dialect.name == "tags" else "lookup"

    def policy(context: str) -> str:
        if dialect.results_seen(context) == 0:
            return "<think> t </think>" + dialect.call(tool, "key", "zorvia")
        return "<think> t </think><answer> Quenby </answer>"

    return policy


def trainer_of(dialect: Dialect, model_dir: Path, tmp_path: Path) -> PPOTrainer:
    config = ExperimentConfig()
    config.actor.model_path = str(model_dir)
    config.data.train_files = [rows_file(tmp_path / "train.jsonl", ["Who is Zorvia?"] * 2)]
    config.data.val_files = [rows_file(tmp_path / "val.jsonl", ["Who is Zorvia?", "Whose is Zorvia?"])]
    config.data.max_prompt_length = 1024
    config.data.max_response_length = 1024
    config.data.train_batch_size = 2
    rollout = config.actor.rollout
    rollout.tools = [ToolConfig("tag_lookup.LookupTool")]
    rollout.max_turns = 2
    rollout.max_tokens_per_turn = 256
    rollout.max_obs_length = 256
    for key, value in dialect.config.items():
        setattr(rollout, key, value)
    config.trainer.run_dir = str(tmp_path / "run")
    return PPOTrainer(config)


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_a_schema_tool_whose_tag_is_not_its_name_is_counted_by_name_in_the_reward_and_validation(
    dialect, tiny_model_dir, tmp_path, monkeypatch
):
    (tmp_path / "tag_lookup.py").write_text(textwrap.dedent(TAGGED_LOOKUP))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tag_lookup", raising=False)
    trainer = trainer_of(dialect, tiny_model_dir, tmp_path)
    assert (trainer.context.tools.tags, trainer.context.tools.names) == (("lk",), ("lookup",))
    assert trainer.context.tools.format.name == dialect.name

    rollout_config = trainer.config.actor.rollout
    manager = LLMGenerationManager(
        ScriptedEngine(trainer.tokenizer, lookup_once(dialect)),
        trainer.tokenizer,
        rollout_config,
        max_prompt_length=trainer.context.max_prompt_length,
        max_response_length=trainer.context.max_response_length,
    )

    def generate_sequences(prompts: list, step: int = 0, validate: bool = False):  # the actor's, here
        return manager.run(prompts, rollout_sampling(rollout_config, greedy=validate), n=1)

    trainer.sampler = StepSampler(trainer.config, None, trainer.tokenizer, trainer.loader, grouped=False)
    monkeypatch.setattr(trainer.sampler, "generate", generate_sequences)

    rollout = generate_sequences(trainer.val_data.prompts)
    assert [t.tool_calls for t in rollout.trajectories] == [{"lookup": 1}] * 2
    assert rollout.metrics["rollout/tool_calls/lookup"] == 1.0
    batch = collate(rollout.trajectories, trainer.tokenizer.pad_token_id, trainer.tokenizer)
    _, reward = RuleRewardWorker(RewardConfig(format_score=True), trainer.context).compute_scores(batch)
    assert reward["reward/tool_calls/lookup"] == 1.0 and reward["reward/well_formed"] == 1.0
    assert not any(key.endswith("/lk") for key in reward)

    val = trainer.validate()
    assert val["val/all/tool_calls/lookup"] == 1.0 and val["val/nq/tool_calls/lookup"] == 1.0
    assert not any(key.endswith("/lk") for key in val)
