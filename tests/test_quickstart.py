"""The quickstart: its profiles (YAML data), its pieces, and the short profile end to end.

The end-to-end test runs the same code path as ``make quickstart`` at tiny sizes and asserts
that every phase ran and the report carries finite numbers; whether PPO *improves* EM is
checked by running the full quickstart (docs/quickstart.md), not here.
"""

from __future__ import annotations

import json
import math
import re
import socket
from urllib.parse import urlparse

import pytest

from agentrl.agent.actions import parse_action
from agentrl.config.schema import ExperimentConfig, ToolConfig
from agentrl.data.world import generate_world
from agentrl.quickstart import (
    FULL,
    PHASES,
    SHORT,
    Profile,
    demonstration_rounds,
    eval_settings,
    main,
    pick_sft_questions,
    run_quickstart,
    summarize,
)
from agentrl.quickstart.profiles import PROFILE_DIR
from agentrl.recipes.profiles import ProfileError, load_profile


def _finite(tree: dict) -> bool:
    return all(_finite(v) if isinstance(v, dict) else math.isfinite(v) for v in tree.values())


def test_demonstration_rounds_mix_oracles_with_wrong_shortcuts():
    world = generate_world(seed=0, num_countries=6, num_people=12, num_companies=6, num_distractors=6)
    questions = pick_sft_questions(world, {1: 20, 2: 10}, seed=0)
    rounds = demonstration_rounds(questions, shortcuts_per_demo=1.5, seed=0)

    oracle, *shortcut_rounds = rounds
    assert [q.id for q, _ in oracle] == [q.id for q in questions]
    for scripts in rounds:  # the scripted rollout takes each prompt once per call
        assert len({q.id for q, _ in scripts}) == len(scripts)
    shortcuts = [(q, turns) for scripts in shortcut_rounds for q, turns in scripts]
    assert 0.9 * 1.5 * len(questions) <= len(shortcuts) <= 1.1 * 1.5 * len(questions)
    for q, turns in shortcuts:
        guess = turns[-1].text.split("<answer>")[1].split("</answer>")[0].strip()
        assert guess == q.subject and guess not in q.golden_answers, "a shortcut echoes the question's name"
        assert len(turns) == 1 and turns[0].query is None, "a shortcut answers without searching"
    assert rounds == demonstration_rounds(questions, shortcuts_per_demo=1.5, seed=0), "seeded"
    assert demonstration_rounds(questions, shortcuts_per_demo=0.0, seed=0) == [oracle]


@pytest.mark.slow
def test_short_quickstart_writes_a_complete_report(tmp_path):
    out = tmp_path / "qs"
    result = run_quickstart(out, SHORT, seed=0)

    assert list(result.seconds) == list(PHASES), "every phase must run, in order"
    assert "report" not in PHASES, "the report is written once, after the timed phases"
    assert all(s >= 0 for s in result.seconds.values())
    assert result.sft_examples > 0 and all(math.isfinite(x) for x in result.sft_loss)
    assert 0 < result.sft_shortcut_examples < result.sft_examples
    for evaluation in (result.before, result.after):
        assert _finite(evaluation)
        assert evaluation["all"]["n"] == SHORT.eval_limit
        assert {"hop1", "hop2"} <= set(evaluation)
        assert evaluation["hop1"]["n"] + evaluation["hop2"]["n"] == evaluation["all"]["n"]

    steps = [m for m in result.metrics if "reward/score/mean" in m]
    assert [m["step"] for m in steps] == list(range(1, SHORT.ppo["trainer.total_steps"] + 1))
    vals = [m for m in result.metrics if "val/all/em" in m]
    assert vals[0]["step"] == 0 and vals[-1]["step"] == SHORT.ppo["trainer.total_steps"]
    assert all(math.isfinite(v) for m in result.metrics for v in m.values() if isinstance(v, float))

    report = (out / "report.md").read_text()
    for needle in (
        "EM after SFT",
        "EM after PPO",
        "single-hop",
        "two-hop",
        "searches/q",
        "reward.png",
        "em.png",
        "Wall time per phase",
        "sft_data",
    ):
        assert needle in report, needle
    for png in ("reward.png", "em.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    payload = json.loads((out / "report.json").read_text())
    assert payload["total_seconds"] == pytest.approx(result.total_seconds)
    assert set(payload["seconds"]) == set(PHASES)
    # The demonstrations are trajectory dumps: observation tokens carry loss_mask 0.
    first = json.loads((out / "sft_data.jsonl").read_text().splitlines()[0])
    assert {s["segment"] for s in first["spans"]} == {"model", "observation"}
    assert all(s["loss_mask"] == (s["segment"] == "model") for s in first["spans"])

    # The retriever was stopped: its port no longer accepts connections.
    port = urlparse(_retrieve_url(out)).port
    with socket.socket() as s, pytest.raises(OSError):
        s.settimeout(1)
        s.connect(("127.0.0.1", port))

    # A trained checkpoint behind `python -m agentrl.serve`, its tools run on the server: the skill
    # stage's (SFT on the oracle demonstrations), asked one of its training questions over plain
    # HTTP. Greedily it searches through the server's retriever and answers after reading the
    # result; seeded samples get each one's final turn, its answer and the calls it made, and the
    # same request is answered the same way twice.
    greedy, first, again = _serve_and_ask(
        out,
        out / "sft_skill",
        "sft_questions.jsonl",
        [{"n": 1, "temperature": 0.0}] + [{"n": 4, "temperature": 1.0, "seed": 0}] * 2,
    )
    (choice,) = greedy
    calls, answer = choice["message"]["tool_calls_made"], choice["message"]["answer"]
    assert calls and all(c["name"] == "search" and c["status"] == "ok" and c["result"] for c in calls)
    assert answer and answer.strip(), choice["message"]["content"]
    assert len(first) == 4 and first == again
    for choice in first:
        message = choice["message"]
        action = parse_action(message["content"], ())  # the rollout's answer rule, on the final turn
        assert message["answer"] == (action.content if action.kind == "answer" else None)
        assert all(call["status"] == "ok" and call["result"] for call in message["tool_calls_made"])


def _serve_and_ask(out, model, questions: str, requests: list[dict]) -> list[list[dict]]:
    """Serve ``model`` with the run's config and a retriever on its index; POST the first question
    of ``questions`` (its training prompt) with each of ``requests``' settings; each reply's choices."""
    import subprocess
    import sys
    import urllib.request

    from agentrl.ports import free_port
    from retriever.process import RetrieverProcess

    question = json.loads((out / questions).read_text().splitlines()[0])
    port = free_port("127.0.0.1")
    with RetrieverProcess(out / "index", log_path=out / "serve_retriever.log") as retriever:
        command = [sys.executable, "-m", "agentrl.serve", "--model", str(model), "--config"]
        command += [str(out / "ppo" / "config.yaml"), "--execute-tools", "--port", str(port)]
        command += ["--retriever-url", retriever.retrieve_url]
        server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            said = []
            for line in iter(server.stdout.readline, ""):
                if line.startswith("serving"):
                    break
                said.append(line)
            else:
                raise AssertionError("the server ended before serving:\n" + "".join(said))
            replies = []
            for settings in requests:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    json.dumps({"messages": question["prompt"], **settings}).encode(),
                    {"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(request, timeout=120) as reply:
                    replies.append(json.loads(reply.read())["choices"])
            return replies
        finally:
            server.terminate()
            server.wait(timeout=30)


def _retrieve_url(out) -> str:
    import yaml

    config = yaml.safe_load((out / "ppo" / "config.yaml").read_text())
    return config["actor"]["rollout"]["tools"][0]["options"]["url"]


def test_bad_override_fails_by_name_before_training(tmp_path, capsys):
    code = main(["--short", "--out", str(tmp_path / "qs"), "actor.optim.lrr=1e-3"])
    assert code == 2
    assert "actor.optim.lrr" in capsys.readouterr().err
    assert not (tmp_path / "qs" / "sft_model").exists()


# --- profiles as data -------------------------------------------------------------------------


def test_the_packaged_profiles_are_the_yaml_files_with_the_shared_ppo_overrides():
    assert load_profile(PROFILE_DIR / "full.yaml", Profile) == FULL
    assert load_profile(PROFILE_DIR / "short.yaml", Profile) == SHORT
    for profile in (FULL, SHORT):
        assert profile.ppo["actor.rollout.schedule"] == "lockstep", "from ppo_common.yaml"
        assert isinstance(profile.sft_lr, float) and all(isinstance(h, int) for h in profile.sft_questions)
    assert SHORT.ppo["data.max_response_length"] == 200 and FULL.ppo["data.max_response_length"] == 320
    assert FULL.eval_limit is None and FULL.ppo["actor.optim.lr"] == 2e-4


def _profile_file(tmp_path, **changes):
    text = (PROFILE_DIR / "short.yaml").read_text()
    (tmp_path / "ppo_common.yaml").write_text((PROFILE_DIR / "ppo_common.yaml").read_text())
    for key, value in changes.items():
        line = re.compile(rf"^{key}:.*$", re.M)
        text = line.sub(f"{key}: {value}", text) if line.search(text) else text + f"{key}: {value}\n"
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    return path


def test_a_profile_with_an_unknown_key_fails_naming_the_file_and_the_key(tmp_path):
    path = _profile_file(tmp_path, sft_lrr="1.0e-3")
    with pytest.raises(ProfileError) as error:
        load_profile(path, Profile)
    assert str(path) in str(error.value) and "'sft_lrr'" in str(error.value)


def test_a_profile_value_of_the_wrong_type_fails_naming_the_file_and_the_key(tmp_path):
    path = _profile_file(tmp_path, sft_lr="1e-3")  # YAML reads 1e-3 (no dot) as a string
    with pytest.raises(ProfileError, match=r"'sft_lr'.*expected float.*3\.0e-3") as error:
        load_profile(path, Profile)
    assert str(path) in str(error.value)
    with pytest.raises(ProfileError, match="'eval_limit'"):
        load_profile(_profile_file(tmp_path, eval_limit="all"), Profile)


# --- the evaluation: agentrl.eval's records, summarised per hop ------------------------------


def test_the_evaluation_summary_groups_records_per_hop():
    def record(hop, em, searches, finished=True):
        source = f"synthetic_world_{hop}hop"
        return {"data_source": source, "em": em, "num_searches": searches, "finished": finished}

    records = [record(1, 1.0, 1), record(1, 0.0, 0), record(2, 1.0, 2, finished=False)]
    summary = summarize(records)
    assert list(summary) == ["all", "hop1", "hop2"]
    assert summary["all"] == {"em": 2 / 3, "searches": 1.0, "finished": 2 / 3, "n": 3.0}
    assert summary["hop1"] == {"em": 0.5, "searches": 0.5, "finished": 1.0, "n": 2.0}
    assert summary["hop2"] == {"em": 1.0, "searches": 2.0, "finished": 0.0, "n": 1.0}


def test_the_evaluation_settings_are_the_ppo_configs_rollout_greedy():
    config = ExperimentConfig()
    rollout = config.actor.rollout
    rollout.max_turns, rollout.max_tokens_per_turn, rollout.max_obs_length = 3, 40, 72
    rollout.schedule = "lockstep"
    search = {"url": "http://h:1/retrieve", "topk": 1}
    rollout.tools = [ToolConfig("agentrl.tools.retrieval.SearchTool", search)]
    config.data.max_prompt_length, config.data.max_response_length, config.data.val_batch_size = 192, 320, 96
    settings = eval_settings(config, seed=3)
    assert settings.greedy and settings.topk == 1 and settings.batch_size == 96
    assert (settings.max_turns, settings.max_tokens_per_turn, settings.max_obs_length, settings.schedule) == (
        3,
        40,
        72,
        "lockstep",
    )
    assert (settings.max_prompt_length, settings.max_response_length) == (192, 320)
