"""The quickstart's short profile end to end: same code path as ``make quickstart``, tiny sizes.

It asserts that every phase ran and the report carries finite numbers; whether PPO
*improves* EM is checked by running the full quickstart (docs/quickstart.md), not here.
"""

from __future__ import annotations

import json
import math
import socket
from urllib.parse import urlparse

import pytest
import ray

from agentrl.data.world import generate_world
from agentrl.quickstart import PHASES, SHORT, demonstration_rounds, main, pick_sft_questions, run_quickstart


@pytest.fixture(autouse=True)
def no_ray_left_behind():
    yield
    if ray.is_initialized():
        ray.shutdown()


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


def test_short_quickstart_writes_a_complete_report(tmp_path):
    out = tmp_path / "qs"
    result = run_quickstart(out, SHORT, seed=0)

    assert list(result.seconds) == list(PHASES), "every phase must run, in order"
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
    for needle in ("EM after SFT", "EM after PPO", "single-hop", "two-hop", "searches/q", "reward.png", "em.png",
                   "Wall time per phase", "sft_data"):  # fmt: skip
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


def _retrieve_url(out) -> str:
    import yaml

    config = yaml.safe_load((out / "ppo" / "config.yaml").read_text())
    return config["actor"]["rollout"]["tools"][0]["options"]["url"]


def test_bad_override_fails_by_name_before_training(tmp_path, capsys):
    code = main(["--short", "--out", str(tmp_path / "qs"), "actor.optim.lrr=1e-3"])
    assert code == 2
    assert "actor.optim.lrr" in capsys.readouterr().err
    assert not (tmp_path / "qs" / "sft_model").exists()
