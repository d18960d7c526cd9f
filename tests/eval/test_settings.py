"""The evaluation's settings are a training config's rollout plus the evaluation's own fields:
``EvalSettings.from_experiment`` is the one bridge, overrides go by field name, and the settings
that reach ``evaluate`` from each pipeline are pinned (no Ray, no model: ``evaluate`` is stubbed)."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest

import agentrl.eval
import agentrl.eval.cli
from agentrl.config.schema import ExperimentConfig, RolloutConfig, ToolConfig
from agentrl.eval import EvalSettings
from agentrl.eval.backends import tool_names
from agentrl.eval.harness import _manager, _tools

SEARCH = "agentrl.tools.retrieval.SearchTool"
CALCULATOR = "agentrl.tools.calculator.CalculatorTool"
URL = "http://127.0.0.1:9/retrieve"
EFFECTIVE = (
    "topk",
    "max_turns",
    "greedy",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "max_tokens_per_turn",
    "max_prompt_length",
    "max_response_length",
    "max_obs_length",
    "schedule",
    "batch_size",
    "retriever_timeout_s",
    "answer_rule",
)


def trained_config() -> ExperimentConfig:
    """A config whose rollout and budgets differ from every default."""
    cfg = ExperimentConfig(seed=5)
    cfg.actor.rollout = RolloutConfig(
        n=3,
        temperature=0.7,
        top_p=0.9,
        top_k=11,
        max_turns=4,
        max_tokens_per_turn=48,
        max_obs_length=77,
        schedule="lockstep",
        check_token_drift=True,
        val_greedy=False,
        tools=[ToolConfig(SEARCH, {"url": URL, "topk": 5, "timeout_s": 12})],
    )
    cfg.data.max_prompt_length, cfg.data.max_response_length, cfg.data.val_batch_size = 300, 600, 24
    return cfg


def test_from_experiment_copies_the_rollout_section_and_the_data_budgets():
    cfg = trained_config()
    settings = EvalSettings.from_experiment(cfg)
    assert settings.rollout == cfg.actor.rollout and settings.rollout is not cfg.actor.rollout
    assert (settings.max_turns, settings.max_tokens_per_turn, settings.max_obs_length) == (4, 48, 77)
    assert (settings.schedule, settings.temperature, settings.top_p, settings.top_k) == (
        "lockstep",
        0.7,
        0.9,
        11,
    )
    assert (settings.max_prompt_length, settings.max_response_length, settings.batch_size) == (300, 600, 24)
    assert (settings.topk, settings.retriever_timeout_s) == (5, 12.0)  # the search tool's options
    assert settings.greedy is False and settings.seed == 5  # decodes as the validation does
    cfg.actor.rollout.max_obs_length = 1
    cfg.actor.rollout.tools[0].options["topk"] = 1
    assert settings.max_obs_length == 77 and settings.rollout.tools[0].options["topk"] == 5  # a copy


def test_an_override_changes_only_the_field_it_names_of_either_kind():
    cfg = trained_config()
    settings = EvalSettings.from_experiment(
        cfg, max_obs_length=512, batch_size=7, answer_rule="tag-or-first-line"
    )
    assert settings.rollout == replace(cfg.actor.rollout, max_obs_length=512)
    assert (settings.batch_size, settings.answer_rule) == (7, "tag-or-first-line")
    assert settings.with_overrides(schedule="concurrent").rollout == replace(
        cfg.actor.rollout, max_obs_length=512, schedule="concurrent"
    )
    assert cfg.actor.rollout.max_obs_length == 77  # the training config is untouched


def test_an_unknown_override_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="no field named 'max_obs_len'"):
        EvalSettings.from_experiment(trained_config(), max_obs_len=512)
    with pytest.raises(ValueError, match="no field named 'temprature'"):
        EvalSettings().with_overrides(temprature=0.5)


def test_an_override_names_one_field_only():
    own = {f.name for f in fields(EvalSettings)}
    assert not own & {f.name for f in fields(RolloutConfig)}


def test_the_default_settings_evaluate_the_default_experiment():
    assert EvalSettings() == EvalSettings.from_experiment(ExperimentConfig())


def test_the_rollout_runs_with_the_settings_rollout_but_raises_on_tool_errors(tokenizer):
    settings = EvalSettings.from_experiment(trained_config())
    agent = _manager(object(), tokenizer, "agent", settings, _tools("agent", settings, URL))
    assert agent.config == replace(settings.rollout, tool_error_policy="raise", tools=[])
    assert list(agent.tools) == ["search"] and agent.tools["search"].topk == 5
    direct = _manager(object(), tokenizer, "direct", settings, _tools("direct", settings, None))
    assert direct.config == replace(settings.rollout, max_turns=0, tool_error_policy="raise", tools=[])
    assert not direct.tools


def test_the_agent_is_evaluated_with_every_tool_of_the_trained_config():
    cfg = trained_config()
    search = ToolConfig(
        SEARCH, {"url": "http://elsewhere:1/retrieve", "topk": 5, "max_retries": 0, "tag": "find"}
    )
    cfg.actor.rollout.tools = [search, ToolConfig(CALCULATOR, {"max_exponent": 3})]
    settings = EvalSettings.from_experiment(cfg, topk=2, retriever_timeout_s=4.0)
    tools = _tools("agent", settings, URL)
    assert [type(t).__name__ for t in tools] == ["SearchTool", "CalculatorTool"]
    assert tool_names(tools) == ["find", "calculate"]
    found, calculator = tools
    # the evaluation's retriever, top-k and timeout; the tool's other options as trained
    assert (found.url, found.topk, found.request_timeout_s, found.max_retries) == (URL, 2, 4.0, 0)
    assert calculator.max_exponent == 3


def test_an_agent_without_a_search_tool_needs_no_retriever():
    cfg = trained_config()
    cfg.actor.rollout.tools = [ToolConfig(CALCULATOR)]
    settings = EvalSettings.from_experiment(cfg)
    assert tool_names(_tools("agent", settings, None)) == ["calculate"]
    cfg.actor.rollout.tools = [ToolConfig(SEARCH)]
    with pytest.raises(ValueError, match="needs a retriever_url"):
        _tools("agent", EvalSettings.from_experiment(cfg), None)


# --- what reaches ``evaluate`` from each pipeline ---------------------------------------------


def effective(settings: EvalSettings, **extra: Any) -> dict[str, Any]:
    return {name: getattr(settings, name) for name in EFFECTIVE} | extra


def pinned(values: str, engine: str, engine_kwargs: dict[str, Any]) -> dict[str, Any]:
    """A row of the table below: the ``EFFECTIVE`` fields' values, space-separated."""
    cast = {"greedy": lambda v: v == "True", "schedule": str, "answer_rule": str}
    floats = ("temperature", "top_p", "retriever_timeout_s")
    row = {
        name: cast.get(name, float if name in floats else int)(value)
        for name, value in zip(EFFECTIVE, values.split(), strict=True)
    }
    return row | {"engine": engine, "engine_kwargs": engine_kwargs}


QUICKSTART_ENGINE = {"max_batch_size": 64, "dtype": "float32"}
RECIPE_ENGINE = {"max_batch_size": 128}
# topk turns greedy temp top_p top_k seed tok/turn prompt response obs schedule batch timeout rule
PINNED = {
    "quickstart-full": pinned(
        "1 2 True 1.0 1.0 0 0 40 192 320 100 lockstep 96 30.0 tag", "hf", QUICKSTART_ENGINE
    ),
    "quickstart-short": pinned(
        "1 2 True 1.0 1.0 0 0 40 192 200 72 lockstep 8 30.0 tag", "hf", QUICKSTART_ENGINE
    ),
    "recipe-full": pinned(
        "3 2 True 1.0 1.0 0 0 64 2048 1280 512 lockstep 125 30.0 tag-or-first-line", "vllm", RECIPE_ENGINE
    ),
    "recipe-tiny": pinned(
        "3 2 True 1.0 1.0 0 0 32 2048 1200 400 lockstep 125 30.0 tag-or-first-line", "hf", RECIPE_ENGINE
    ),
    "rl_pool-full": pinned(
        "3 2 False 1.0 1.0 0 0 64 2048 1280 512 lockstep 125 30.0 tag", "vllm", RECIPE_ENGINE
    ),
    "rl_pool-tiny": pinned(
        "3 2 False 1.0 1.0 0 0 32 2048 1200 400 lockstep 125 30.0 tag", "hf", RECIPE_ENGINE
    ),
    "cli": pinned(
        "3 2 True 1.0 1.0 0 0 256 2048 1024 512 lockstep 32 30.0 tag",
        "hf",
        {"max_batch_size": 64, "dtype": "auto"},
    ),
}


class Reached(Exception):
    """Raised by the stub ``evaluate`` once it has seen its settings."""


@pytest.fixture
def reaching(monkeypatch: pytest.MonkeyPatch):
    """Calls a pipeline up to its ``evaluate`` and returns what reached it."""

    def call(run) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        def evaluate(model, *args, settings=None, **kwargs):
            seen.update(effective(settings, engine=model.engine, engine_kwargs=dict(model.engine_kwargs)))
            raise Reached

        monkeypatch.setattr(agentrl.eval, "evaluate", evaluate)  # the pipelines import it when they run
        monkeypatch.setattr(agentrl.eval.cli, "evaluate", evaluate)
        with pytest.raises(Reached):
            run()
        return seen

    return call


@pytest.fixture
def run_files(tmp_path: Path) -> dict[str, Path]:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    files = {"model": model, "train": tmp_path / "train.jsonl", "test": tmp_path / "test.jsonl"}
    files["train"].write_text("")
    files["test"].write_text("")
    return files


@pytest.mark.parametrize("profile_name", ["full", "short"])
def test_the_quickstart_evaluates_with_its_ppo_rollout(profile_name, reaching, run_files, tmp_path):
    from agentrl.config import load_config
    from agentrl.quickstart import phases, profiles
    from agentrl.quickstart.evaluation import evaluate_policy

    profile = profiles.PROFILES[profile_name]
    world = phases.WorldFiles(tmp_path / "corpus.jsonl", run_files["train"], run_files["test"])
    config = load_config(
        "ppo", phases.ppo_overrides(profile, tmp_path, run_files["model"], world, URL, [], 0)
    )
    seen = reaching(
        lambda: evaluate_policy(run_files["model"], run_files["test"], config, profile.eval_limit, 0)
    )
    assert seen == PINNED[f"quickstart-{profile_name}"]
    assert seen["max_obs_length"] == config.actor.rollout.max_obs_length  # no override: the trained rollout


@pytest.mark.parametrize("profile_name", ["full", "tiny"])
def test_the_recipe_cells_evaluate_the_rl_rollout_under_the_held_out_protocol(
    profile_name, reaching, run_files, tmp_path
):
    from agentrl.recipes.search_qa_eval import evaluate_cells
    from agentrl.recipes.search_qa_phases import rl_config
    from agentrl.recipes.search_qa_profile import PROFILES

    profile = PROFILES[profile_name]
    config = rl_config(profile, tmp_path, "rl_full", run_files["model"], None, URL)
    models = {"model": str(run_files["model"])}
    seen = reaching(
        lambda: evaluate_cells(tmp_path, models, "index", ["direct"], config=config, **profile.eval_options)
    )
    assert seen == PINNED[f"recipe-{profile_name}"]


@pytest.mark.parametrize("profile_name", ["full", "tiny"])
def test_the_rl_pool_samples_with_the_rl_rollout(profile_name, reaching, run_files, tmp_path):
    from agentrl.recipes.rl_pool import solved_once
    from agentrl.recipes.search_qa_phases import rl_config
    from agentrl.recipes.search_qa_profile import PROFILES

    profile = PROFILES[profile_name]
    config = rl_config(profile, tmp_path, "rl_full", run_files["model"], None, URL)
    rows = [{"id": "a", "question": "Who?", "golden_answers": ["x"], "data_source": "nq"}]
    model = str(run_files["model"])
    seen = reaching(
        lambda: solved_once(
            model, rows, URL, tmp_path, limit=1, seed=0, config=config, **profile.eval_options
        )
    )
    assert seen == PINNED[f"rl_pool-{profile_name}"]


def test_the_command_line_keeps_its_defaults(reaching, run_files, tmp_path):
    argv = ["--model", str(run_files["model"]), "--data", f"x={run_files['test']}", "--out", str(tmp_path)]
    seen = reaching(lambda: agentrl.eval.cli.main([*argv, "--mode", "direct"]))
    assert seen == PINNED["cli"]


def test_every_command_line_flag_reaches_its_field(reaching, run_files, tmp_path):
    argv = ["--model", str(run_files["model"]), "--data", f"x={run_files['test']}", "--out", str(tmp_path)]
    flags = "--sample --temperature 0.7 --top-p 0.9 --top-k 5 --seed 3 --topk 2 --max-turns 4 "
    flags += "--max-tokens-per-turn 33 --max-prompt-length 999 --max-response-length 777 "
    flags += "--max-obs-length 55 --schedule concurrent --batch-size 7 --answer-rule tag-or-first-line"
    seen = reaching(lambda: agentrl.eval.cli.main([*argv, "--mode", "agent", *flags.split()]))
    expected = pinned(
        "2 4 False 0.7 0.9 5 3 33 999 777 55 concurrent 7 30.0 tag-or-first-line",
        "hf",
        {"max_batch_size": 64, "dtype": "auto"},
    )
    assert seen == expected


def test_the_command_line_takes_the_tools_of_a_training_config(run_files, tmp_path):
    from agentrl.config.loader import to_yaml

    cfg = trained_config()
    cfg.actor.rollout.tools = [ToolConfig(SEARCH, {"topk": 5}), ToolConfig(CALCULATOR, {"max_exponent": 3})]
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))  # as a run writes it
    argv = ["--model", str(run_files["model"]), "--data", f"x={run_files['test']}", "--out", str(tmp_path)]
    args = agentrl.eval.cli.build_parser().parse_args([*argv, "--config", str(tmp_path / "config.yaml")])
    settings = agentrl.eval.cli.settings_from_args(args)
    assert settings.rollout.tools == cfg.actor.rollout.tools
    assert settings.max_turns == EvalSettings().max_turns  # the rest comes from the flags, as before
    without = agentrl.eval.cli.settings_from_args(agentrl.eval.cli.build_parser().parse_args(argv))
    assert without.rollout.tools == [ToolConfig()]
    (tmp_path / "bad.yaml").write_text("actor:\n  rollout:\n    tools: [{class_path: x, optons: {}}]\n")
    with pytest.raises(SystemExit, match="bad.yaml"):
        agentrl.eval.cli.settings_from_args(
            agentrl.eval.cli.build_parser().parse_args([*argv, "--config", str(tmp_path / "bad.yaml")])
        )


def test_the_tool_fields_the_command_line_copies_are_rollout_fields():
    assert set(agentrl.eval.cli.TOOL_FIELDS) <= {f.name for f in fields(RolloutConfig)}
