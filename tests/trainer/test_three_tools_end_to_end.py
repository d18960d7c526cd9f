"""Search, the page reader and the sandboxed Python tool registered by config alone in a hermes run.

One GRPO step on Ray over the quickstart's world (its generator at a small size, a BM25 index,
a real retriever server that serves ``/retrieve`` and ``/open_page``). The three tools are named
only in a config file's ``actor.rollout.tools`` block, the one ``docs/adding_a_tool.md``
(section 10) shows. What is scripted is the policy's sampling (a random tiny model never writes
a ``<tool_call>``): ``support.scripted_actor.ThreeToolsActorWorker`` searches the question and
sets a variable in Python, then opens the page of the first result's title and prints the
variable, then answers. The trainer's trajectory dump must show each call with its arguments and
the tool message it read, the tool messages masked out of the loss, and the metrics count each
tool; no interpreter process or working directory may outlive the run.

The Python tool runs at ``isolation: unshare``, named explicitly so the test means the same
thing on every machine: where ``unshare`` cannot make its namespaces (no util-linux ``unshare``
and ``setpriv``, or neither root nor unprivileged user namespaces) the test is skipped with the
reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from agentrl.agent.formats import HERMES_TEMPLATE
from agentrl.config import load_config
from agentrl.data.instruction import instruction_template
from agentrl.data.qa import read_question_records, to_training_rows, write_rows
from agentrl.models.tiny import make_tiny_model_dir
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


@pytest.fixture(autouse=True)
def ray_session():
    yield
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def work_root() -> Iterator[str]:
    """The interpreters' work root, under /tmp so the sandbox uid may enter it; must stay empty."""
    unavailable = probe("unshare")
    if unavailable is not None:
        pytest.skip(f"the python tool's isolation=unshare does not work here: {unavailable}")
    path = tempfile.mkdtemp(prefix="agentrl-three-tools-")
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


def hermes_run_data(world: Path, out: Path) -> tuple[Path, Path, Path]:
    """Two train and two test rows prompted for a hermes run, and a tiny model whose tokenizer knows them."""
    instruction = instruction_template(tool_format="hermes")
    rows = {
        split: to_training_rows(
            read_question_records(world / f"{split}.jsonl")[:2], split, "world", instruction
        )
        for split in ("train", "test")
    }
    for split, split_rows in rows.items():
        write_rows(split_rows, out / f"{split}.parquet")
    texts = [row["prompt"][0]["content"] for row in rows["train"]] + [HERMES_TEMPLATE]
    model = make_tiny_model_dir(out / "model", texts=texts, seed=0, tool_call_tokens=True)
    return out / "train.parquet", out / "test.parquet", model


def assert_each_tool_called(dump: dict) -> None:
    """One dump line shows ``search_read_compute``'s four calls, each answered, read and masked."""
    from support.scripted_actor import PAGE_WORDS, PYTHON_CALLS

    for name in ("search", "open_page", "python"):  # each schema in the prompt, by the template
        assert f'"name": "{name}"' in dump["prompt_text"]
    assert dump["tool_calls"] == {"search": 1, "open_page": 1, "python": 2}
    assert dump["tool_calls_invalid"] == {} and dump["tool_failures"] == 0 and dump["finished"]
    calls = dump["calls"]
    assert [(c["turn"], c["name"], c["status"]) for c in calls] == [
        (0, "search", "ok"),
        (0, "python", "ok"),
        (1, "open_page", "ok"),
        (1, "python", "ok"),
    ]
    search, set_x, page, print_x = calls
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


@pytest.mark.slow  # Ray, a retriever server, one training step
@pytest.mark.timeout(240)
def test_search_page_reader_and_python_registered_by_config_are_each_called_in_a_hermes_training_run(
    search_world, tmp_path, work_root, monkeypatch
):
    from support.scripted_actor import PAGE_WORDS, ThreeToolsActorWorker

    monkeypatch.chdir(tmp_path)
    train, test, model = hermes_run_data(search_world.root / "world", tmp_path)
    server = search_world.retrieve_url.removesuffix("/retrieve")
    tools_file = tmp_path / "tools.yaml"
    tools_file.write_text(TOOLS_YAML.format(server=server, work_root=work_root))
    run_dir = tmp_path / "run"
    overrides = search_world.overrides(
        run_dir,
        steps=1,
        **{
            "actor.model_path": model,
            "data.train_files": f"[{train}]",
            "data.val_files": f"[{test}]",
            "data.train_batch_size": 2,
            "data.max_prompt_length": 2048,
            "data.max_response_length": 1024,
            "actor.rollout.n": 2,
            "actor.rollout.max_turns": 3,
            "actor.rollout.max_tokens_per_turn": 256,
            "actor.rollout.max_obs_length": 256,
            "actor.use_kl_loss": False,
            "reward.format_score": True,
            "trainer.dump_trajectories": True,
        },
    )
    overrides = [o for o in overrides if not o.startswith("actor.rollout.tools=")]  # the file's tools
    config = load_config(["grpo", tools_file], overrides)
    assert [t.class_path.rsplit(".", 1)[1] for t in config.actor.rollout.tools] == [
        "SearchTool",
        "PageReaderTool",
        "PythonSandboxTool",
    ]
    monkeypatch.setattr(roles, "ActorWorker", ThreeToolsActorWorker)
    trainer = PPOTrainer(config)
    assert trainer.context.tool_names == ("search", "open_page", "python")
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
        ray.shutdown()

    lines = (run_dir / "trajectories" / "step_1.jsonl").read_text().splitlines()
    assert len(lines) == 4
    for line in lines:
        assert_each_tool_called(json.loads(line))
    # the per-tool metrics: the rollout's counts and each tool's own keys, the reward's format check
    (row,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert row["rollout/tool_calls/search"] == 1.0 and row["rollout/tool_calls/open_page"] == 1.0
    assert row["rollout/tool_calls/python"] == 2.0
    assert row["reward/tool_calls/python"] == 2.0 and row["reward/well_formed"] == 1.0
    assert row["rollout/tool/open_page/words"] == float(PAGE_WORDS)
    assert row["rollout/tool/open_page/not_found"] == 0.0
    assert row["rollout/tool/python/errors"] == 0.0 and row["rollout/tool/python/restarts"] == 0.0

    # nothing of the sandbox outlives the run: no interpreter, no working directory
    deadline = time.monotonic() + 10
    while processes_naming(work_root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_naming(work_root) == []
    assert os.listdir(work_root) == []


def test_the_three_tools_block_in_the_docs_is_the_one_this_test_registers():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "adding_a_tool.md").read_text()
    assert TOOLS_YAML.format(server="http://127.0.0.1:8000", work_root="/tmp/agentrl-python") in docs
