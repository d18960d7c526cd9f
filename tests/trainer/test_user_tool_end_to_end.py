"""A user's schema tool added by config alone to a hermes run, followed from the config to the evaluation.

What is scripted, and why: the policy's *sampling*. A random tiny model never writes a
``<tool_call>``, so the actor's rollout engine plays a scripted policy
(``support.scripted_actor.ScriptedActorWorker``: in one turn it calls the user's ``lookup``
and ``search``, then it answers). Everything else is the real path: the tool is named only in
``actor.rollout.tools`` (a module written to tmp_path, imported by path on the driver's check
and in the Ray workers), the training data is prompted through the rollout's hermes format
(its schema in the prompt via the chat template), the actor's ``LLMGenerationManager`` is
built from the config as the actor builds it, the calls run through the dispatcher (the
search against the real retriever server), the reward role checks the hermes format on the
rollout's record, the trainer logs metrics and dumps trajectories, and
``python -m agentrl.eval --config RUN/config.yaml`` (its ``main``) evaluates the trained
checkpoint with the run's tools (there the checkpoint's own model samples).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import ray

from agentrl.agent.formats import HERMES_TEMPLATE
from agentrl.agent.generation import prompt_encoder
from agentrl.agent.prompts import encode_messages
from agentrl.config import load_config
from agentrl.config.loader import load_rollout
from agentrl.data.instruction import instruction_template
from agentrl.data.qa import read_question_records, to_training_rows, write_rows
from agentrl.eval.cli import main as eval_main
from agentrl.models.loading import load_tokenizer
from agentrl.models.tiny import make_tiny_model_dir
from agentrl.trainer import roles
from agentrl.trainer.ppo_trainer import PPOTrainer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # Ray, a retriever server, one training step

LOOKUP_MODULE = '''
"""A user's schema tool: look a key up in a table given in the config."""

from agentrl.tools import ToolResult, ToolSpec


class LookupTool:
    spec = ToolSpec(
        "lookup",
        "Look a key up in the glossary and return its value.",
        {
            "type": "object",
            "properties": {"key": {"type": "string", "description": "the key to look up"}},
            "required": ["key"],
            "additionalProperties": False,
        },
    )

    def __init__(self, table: dict, timeout_s: float = 2.0) -> None:
        self.table = {str(k).lower(): str(v) for k, v in table.items()}
        self.timeout_s = timeout_s

    async def call(self, arguments: list) -> list:
        return [ToolResult(self.table.get(a["key"].lower(), f"No entry for {a['key']}.")) for a in arguments]
'''
HERMES_INSTRUCTION = instruction_template(tool_format="hermes")


@pytest.fixture(autouse=True)
def ray_session():
    yield
    if ray.is_initialized():
        ray.shutdown()


def hermes_rows(questions: Path, split: str, out: Path) -> list[dict]:
    """Four training rows prompted for a hermes run (``data/prepare_qa.py --config`` writes the same)."""
    rows = to_training_rows(
        read_question_records(questions)[:4], split, "synthetic_world", HERMES_INSTRUCTION
    )
    write_rows(rows, out)
    return rows


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_schema_tool_added_by_config_to_a_hermes_run_reaches_prompt_rollout_reward_metrics_dumps_and_eval(
    search_world, tmp_path, monkeypatch
):
    (tmp_path / "user_lookup.py").write_text(textwrap.dedent(LOOKUP_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))  # the user's module, where a launch directory would be
    monkeypatch.chdir(tmp_path)
    from support.scripted_actor import LOOKUP_KEY, ScriptedActorWorker

    world = search_world.root / "world"
    train, test = tmp_path / "train.parquet", tmp_path / "test.parquet"
    train_rows = hermes_rows(world / "train.jsonl", "train", train)
    test_rows = hermes_rows(world / "test.jsonl", "test", test)
    texts = [row["prompt"][0]["content"] for row in train_rows] + [HERMES_TEMPLATE, LOOKUP_MODULE]
    model = make_tiny_model_dir(tmp_path / "model", texts=texts, seed=0, tool_call_tokens=True)

    tools = (
        "[{class_path: agentrl.tools.retrieval.SearchTool, options: {url: '"
        + search_world.retrieve_url
        + "', topk: 1}}, {class_path: user_lookup.LookupTool, options: {table: {"
        + LOOKUP_KEY
        + ": Quenby}}}]"
    )
    run_dir = tmp_path / "run"
    overrides = search_world.overrides(
        run_dir,
        steps=1,
        **{
            "actor.model_path": model,
            "data.train_files": f"[{train}]",
            "data.val_files": f"[{test}]",
            "data.train_batch_size": 2,
            "data.val_limit": 2,
            "data.max_prompt_length": 2048,
            "data.max_response_length": 512,
            "actor.rollout.n": 2,
            "actor.rollout.max_turns": 2,
            "actor.rollout.max_tokens_per_turn": 128,
            "actor.rollout.max_obs_length": 160,
            "actor.rollout.tool_format": "hermes",
            "actor.rollout.chat_template": "hermes",
            "actor.rollout.tools": tools,
            "actor.use_kl_loss": False,
            "reward.format_score": True,
            "trainer.test_freq": 1,
            "trainer.dump_trajectories": True,
        },
    )
    config = load_config("grpo", overrides)
    monkeypatch.setattr(roles, "ActorWorker", ScriptedActorWorker)
    trainer = PPOTrainer(config)
    assert trainer.context.tool_tags == trainer.context.tool_names == ("search", "lookup")
    assert trainer.context.tool_format == "hermes"
    try:
        trainer.fit()
    finally:
        trainer.shutdown()

    # the prompt: the tool's schema, through the chat template
    (row,) = read_metrics(run_dir)
    dumps = [
        json.loads(line) for line in (run_dir / "trajectories" / "step_1.jsonl").read_text().splitlines()
    ]
    assert len(dumps) == 4
    for dump in dumps:
        assert '"name": "lookup"' in dump["prompt_text"]
        assert "Look a key up in the glossary" in dump["prompt_text"]
        # the rollout: both calls of the first turn ran, the lookup answered from the configured table
        calls = {c["name"]: c for c in dump["calls"]}
        assert calls["lookup"]["arguments"] == {"key": LOOKUP_KEY}
        assert calls["lookup"]["status"] == "ok" and calls["lookup"]["message"] == "Quenby"
        assert calls["search"]["status"] == "ok" and calls["search"]["message"]
        assert dump["tool_calls"] == {"lookup": 1, "search": 1} and dump["tool_calls_invalid"] == {}
        assert any("<tool_response>" in s["text"] and s["loss_mask"] == 0 for s in dump["spans"])
    # the per-tool metrics of the rollout, the reward's format check, and validation
    assert row["rollout/tool_calls/lookup"] == 1.0 and row["rollout/tool_calls/search"] == 1.0
    assert row["reward/tool_calls/lookup"] == 1.0 and row["reward/tool_calls/search"] == 1.0
    assert row["reward/well_formed"] == 1.0
    assert row["val/all/tool_calls/lookup"] == 1.0

    # the evaluation takes the run's tools and format from its config.yaml
    run_config = run_dir / "config.yaml"
    assert [t.class_path for t in load_rollout(run_config).tools][-1] == "user_lookup.LookupTool"
    out = tmp_path / "eval"
    argv = ["--model", str(run_dir / "checkpoints" / "step_1"), "--config", str(run_config)]
    argv += ["--data", f"world={test}", "--mode", "agent", "--retriever-url", search_world.retrieve_url]
    argv += ["--limit", "2", "--max-turns", "1", "--max-tokens-per-turn", "8", "--no-progress"]
    assert eval_main([*argv, "--out", str(out)]) == 0
    summary = json.loads((out / "agent" / "metrics.json").read_text())["metrics"]["world"]
    assert "tool_calls/lookup" in summary and "tool_calls/search" in summary
    # its prompts are the hermes format's, with the schemas of the run's tools
    tokenizer = load_tokenizer(model)
    encode = prompt_encoder(config.actor.rollout, tokenizer)
    lines = (out / "agent" / "predictions.jsonl").read_text().splitlines()
    records = [r for r in map(json.loads, lines) if "id" in r]  # the first line is the settings header
    assert len(records) == 2
    by_id = {r["id"]: r for r in test_rows}
    for record in records:
        messages = [dict(m) for m in by_id[record["id"]]["prompt"]]
        assert record["prompt_tokens"] == len(encode(messages))
        assert record["prompt_tokens"] > len(encode_messages(tokenizer, messages)) + 50
