"""Every kind of tool registered by config alone in one hermes training run, from config to evaluation.

One GRPO step on Ray over the quickstart's world (a BM25 index, a real retriever server serving
``/retrieve`` and ``/open_page``) with four tools named only in a config file's
``actor.rollout.tools`` block: the three the docs register together (``docs/adding_a_tool.md``,
section 10: search, the page reader, sandboxed Python) and a user's own schema tool, ``lookup``,
in a module written to the test's directory and imported by path on the driver's check and in
the Ray workers.

What is scripted, and why: the policy's *sampling*. A random tiny model never writes a
``<tool_call>``, so the actor's rollout engine plays ``support.scripted_actor.every_tool``: it
looks the key up, searches the question and sets a variable in Python, then opens the page of
the first result's title and prints the variable, then answers. Everything else is the real
path: the training data prompted through the hermes format (each schema in the prompt by the
chat template), the actor's ``LLMGenerationManager`` built from the config, the calls run by the
dispatcher, the reward role's format check on the rollout's record, the metrics, the trajectory
dump (each call with its arguments and the tool message it read, the tool messages masked out
of the loss), validation, and ``python -m agentrl.eval --config RUN/config.yaml`` evaluating the
checkpoint with the run's tools. No interpreter process or working directory outlives the run.

The Python tool runs at ``isolation: unshare``, named explicitly so the test means the same
thing on every machine: where ``unshare`` cannot make its namespaces the test is skipped with
the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.ppo_runs import read_metrics

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
from agentrl.tool_identity import HERMES, ToolIdentity
from agentrl.tools.sandbox.isolation import probe
from agentrl.trainer import roles
from agentrl.trainer.ppo_trainer import PPOTrainer

# What a run's config file holds to register the three tools (docs/adding_a_tool.md, section 10).
TOOLS_YAML = """\
actor:
  rollout:
    tool_format: hermes
    chat_template: hermes
    tools:
      - class_path: agentrl.tools.retrieval.SearchTool
        options: {{url: "{server}/retrieve", topk: 1}}
      - class_path: agentrl.tools.retrieval.PageReaderTool
        options: {{url: "{server}/open_page", length: 200}}
      - class_path: agentrl.tools.sandbox.PythonSandboxTool
        options: {{isolation: unshare, wall_time_s: 10, max_interpreters: 4, work_root: "{work_root}"}}
"""
# ... and a user's tool, by the path of a module of the user's own
USER_TOOL_YAML = """\
      - class_path: user_lookup.LookupTool
        options: {{table: {{{key}: Quenby}}}}
"""
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
TOOL_NAMES = ("search", "open_page", "python", "lookup")


@pytest.fixture
def work_root() -> Iterator[str]:
    """The interpreters' work root, under /tmp so the sandbox uid may enter it; must stay empty."""
    unavailable = probe("unshare")
    if unavailable is not None:
        pytest.skip(f"the python tool's isolation=unshare does not work here: {unavailable}")
    path = tempfile.mkdtemp(prefix="agentrl-tools-e2e-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def processes_naming(text: str) -> list[int]:
    """Live processes whose command line holds ``text`` (an interpreter's names its work root)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if text.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry))
    return found


def hermes_rows(questions: Path, split: str, out: Path, count: int) -> list[dict]:
    """``count`` rows prompted for a hermes run (``data/prepare_qa.py --config`` writes the same)."""
    rows = to_training_rows(
        read_question_records(questions)[:count], split, "synthetic_world", HERMES_INSTRUCTION
    )
    write_rows(rows, out)
    return rows


def assert_each_tool_called(dump: dict) -> None:
    """One dump line shows ``every_tool``'s five calls, each answered, read and masked."""
    from support.scripted_actor import LOOKUP_KEY, PAGE_WORDS, PYTHON_CALLS

    for name in TOOL_NAMES:  # each schema in the prompt, by the template
        assert f'"name": "{name}"' in dump["prompt_text"]
    assert "Look a key up in the glossary" in dump["prompt_text"]
    assert dump["tool_calls"] == {"lookup": 1, "search": 1, "open_page": 1, "python": 2}
    assert dump["tool_calls_invalid"] == {} and dump["tool_failures"] == 0 and dump["finished"]
    calls = dump["calls"]
    assert [(c["turn"], c["name"], c["status"]) for c in calls] == [
        (0, "lookup", "ok"),
        (0, "search", "ok"),
        (0, "python", "ok"),
        (1, "open_page", "ok"),
        (1, "python", "ok"),
    ]
    lookup, search, set_x, page, print_x = calls
    assert lookup["arguments"] == {"key": LOOKUP_KEY} and lookup["message"] == "Quenby"  # the config's table
    question = dump["prompt_text"].split("Question:", 1)[1].split("<|im_end|>", 1)[0].strip()
    assert search["arguments"] == {"query": question}
    assert search["message"].startswith('Doc 1(Title: "')
    title = search["message"].split('"', 2)[1]  # the page of the first result, by its title
    assert page["arguments"] == {"title": title, "length": PAGE_WORDS}
    assert page["message"].startswith(f'Page "{title}", words 0-{PAGE_WORDS - 1} of ')
    assert [set_x["arguments"], print_x["arguments"]] == [{"code": code} for code in PYTHON_CALLS]
    assert set_x["message"] == "(no output)" and print_x["message"] == "x is 42"  # one interpreter
    # each tool message sits in an observation span, out of the loss; the calls are the model's
    observations = "".join(s["text"] for s in dump["spans"] if s["loss_mask"] == 0)
    model_text = "".join(s["text"] for s in dump["spans"] if s["loss_mask"] == 1)
    assert {s["segment"] for s in dump["spans"] if s["loss_mask"] == 0} == {"observation"}
    for call in calls:
        assert f"<tool_response>\n{call['message'][:40]}" in observations
        assert f'"name": "{call["name"]}"' in model_text and call["message"] not in model_text
    for span in dump["spans"]:
        assert set(dump["loss_mask"][span["start"] : span["end"]]) == {span["loss_mask"]}


@pytest.mark.slow  # Ray, a retriever server, one training step, an evaluation
@pytest.mark.timeout(300)
def test_four_tools_registered_by_config_one_of_them_the_users_are_each_called_in_a_hermes_run_and_its_eval(
    search_world, tmp_path, work_root, monkeypatch
):
    (tmp_path / "user_lookup.py").write_text(textwrap.dedent(LOOKUP_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))  # the user's module, where a launch directory would be
    monkeypatch.chdir(tmp_path)
    from support.scripted_actor import LOOKUP_KEY, PAGE_WORDS, ScriptedActorWorker

    world = search_world.root / "world"
    train, test = tmp_path / "train.parquet", tmp_path / "test.parquet"
    train_rows = hermes_rows(world / "train.jsonl", "train", train, 2)
    test_rows = hermes_rows(world / "test.jsonl", "test", test, 2)
    texts = [row["prompt"][0]["content"] for row in train_rows] + [HERMES_TEMPLATE, LOOKUP_MODULE]
    model = make_tiny_model_dir(tmp_path / "model", texts=texts, seed=0, tool_call_tokens=True)
    server = search_world.retrieve_url.removesuffix("/retrieve")
    tools_file = tmp_path / "tools.yaml"
    tools_file.write_text(
        TOOLS_YAML.format(server=server, work_root=work_root) + USER_TOOL_YAML.format(key=LOOKUP_KEY)
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
            "data.max_response_length": 1024,
            "actor.rollout.n": 2,
            "actor.rollout.max_turns": 3,
            "actor.rollout.max_tokens_per_turn": 256,
            "actor.rollout.max_obs_length": 256,
            "actor.use_kl_loss": False,
            "reward.format_score": True,
            "trainer.test_freq": 1,
            "trainer.dump_trajectories": True,
        },
    )
    overrides = [o for o in overrides if not o.startswith("actor.rollout.tools=")]  # the file's tools
    config = load_config(["grpo", tools_file], overrides)
    assert [t.class_path.rsplit(".", 1)[1] for t in config.actor.rollout.tools] == [
        "SearchTool",
        "PageReaderTool",
        "PythonSandboxTool",
        "LookupTool",
    ]
    monkeypatch.setattr(roles, "ActorWorker", ScriptedActorWorker)
    trainer = PPOTrainer(config)
    assert trainer.context.tools == ToolIdentity(TOOL_NAMES, TOOL_NAMES, HERMES)
    try:
        trainer.fit()
    finally:
        trainer.shutdown()

    lines = (run_dir / "trajectories" / "step_1.jsonl").read_text().splitlines()
    assert len(lines) == 4
    for line in lines:
        assert_each_tool_called(json.loads(line))
    # the per-tool metrics: the rollout's counts and each tool's own keys, the reward's format
    # check on the rollout's record, validation
    (row,) = read_metrics(run_dir)
    assert row["rollout/tool_calls/search"] == 1.0 and row["rollout/tool_calls/open_page"] == 1.0
    assert row["rollout/tool_calls/python"] == 2.0 and row["rollout/tool_calls/lookup"] == 1.0
    assert row["reward/tool_calls/python"] == 2.0 and row["reward/tool_calls/lookup"] == 1.0
    assert row["reward/tool_calls/search"] == 1.0 and row["reward/well_formed"] == 1.0
    assert row["rollout/tool/open_page/words"] == float(PAGE_WORDS)
    assert row["rollout/tool/open_page/not_found"] == 0.0
    assert row["rollout/tool/python/errors"] == 0.0 and row["rollout/tool/python/restarts"] == 0.0
    assert row["val/all/tool_calls/lookup"] == 1.0

    # nothing of the sandbox outlives the run: no interpreter, no working directory
    deadline = time.monotonic() + 10
    while processes_naming(work_root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_naming(work_root) == []
    assert os.listdir(work_root) == []

    # the evaluation takes the run's tools and format from its config.yaml
    run_config = run_dir / "config.yaml"
    assert [t.class_path for t in load_rollout(run_config).tools][-1] == "user_lookup.LookupTool"
    out = tmp_path / "eval"
    argv = ["--model", str(run_dir / "checkpoints" / "step_1"), "--config", str(run_config)]
    argv += ["--data", f"world={test}", "--mode", "agent", "--retriever-url", search_world.retrieve_url]
    argv += ["--limit", "2", "--max-turns", "1", "--max-tokens-per-turn", "8", "--no-progress"]
    assert eval_main([*argv, "--out", str(out)]) == 0
    summary = json.loads((out / "agent" / "metrics.json").read_text())["metrics"]["world"]
    assert {f"tool_calls/{name}" for name in TOOL_NAMES} <= summary.keys()
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


def test_the_three_tools_block_in_the_docs_is_the_one_this_test_registers():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "adding_a_tool.md").read_text()
    assert TOOLS_YAML.format(server="http://127.0.0.1:8000", work_root="/tmp/agentrl-python") in docs
