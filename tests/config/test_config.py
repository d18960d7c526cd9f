"""Config: presets load, overrides apply, bad keys and values stop with the key named."""

import re
from typing import get_args

import pytest

from agentrl.config import ConfigError, ExperimentConfig, available_presets, load_config
from agentrl.config.schema import ImportanceLevel, ImportanceMode, staleness_bound
from agentrl.core.off_policy import IS_LEVELS, IS_MODES


@pytest.fixture
def model_dir(tmp_path):
    path = tmp_path / "model"
    path.mkdir()
    return str(path)


def test_presets_load_typed(model_dir):
    assert {"ppo", "grpo"} <= set(available_presets())
    ppo = load_config("ppo", [f"actor.model_path={model_dir}"])
    assert isinstance(ppo, ExperimentConfig)
    assert ppo.algorithm.adv_estimator == "gae" and ppo.trainer.run_dir == "runs/ppo"
    grpo = load_config("grpo", [f"actor.model_path={model_dir}"])
    assert grpo.algorithm.adv_estimator == "grpo" and grpo.actor.rollout.n >= 2 and grpo.actor.use_kl_loss


def test_dotted_overrides_apply_with_types(model_dir):
    cfg = load_config(
        "ppo",
        [
            f"actor.model_path={model_dir}",
            "actor.optim.lr=3e-6",
            "actor.rollout.n=4",
            "algorithm.adv_estimator=rloo",
            "actor.dual_clip_c=3",
            "trainer.logger=[console,tensorboard]",
            "actor.rollout.tools=[{class_path: agentrl.tools.calculator.CalculatorTool, options: {}}]",
        ],
    )
    assert cfg.actor.optim.lr == 3e-6 and isinstance(cfg.actor.optim.lr, float)
    assert cfg.actor.rollout.n == 4 and cfg.algorithm.adv_estimator == "rloo"
    assert cfg.actor.dual_clip_c == 3.0
    assert cfg.trainer.logger == ["console", "tensorboard"]
    assert cfg.actor.rollout.tools[0].class_path.endswith("CalculatorTool")


def test_unknown_key_is_named_with_suggestion(model_dir):
    with pytest.raises(
        ConfigError, match=r"unknown config key 'actor\.optim\.lrr' \(did you mean 'actor\.optim\.lr'\?\)"
    ):
        load_config("ppo", [f"actor.model_path={model_dir}", "actor.optim.lrr=1e-6"])
    with pytest.raises(ConfigError, match=r"unknown config key 'trainer\.totl_steps'.*trainer\.total_steps"):
        load_config("ppo", [f"actor.model_path={model_dir}", "trainer.totl_steps=3"])


def test_wrong_type_names_key_and_expected_type(model_dir):
    with pytest.raises(ConfigError, match=r"'actor\.optim\.lr' expects float, got str 'fast'"):
        load_config("ppo", [f"actor.model_path={model_dir}", "actor.optim.lr=fast"])
    with pytest.raises(ConfigError, match=r"'actor\.rollout\.n' expects integer"):
        load_config("ppo", [f"actor.model_path={model_dir}", "actor.rollout.n=2.5"])


def test_all_problems_reported_together(model_dir):
    with pytest.raises(ConfigError) as info:
        load_config("ppo", [f"actor.model_path={model_dir}", "actor.optim.lrr=1", "critic.optm.lr=2"])
    assert "actor.optim.lrr" in str(info.value) and "critic.optm" in str(info.value)


def test_rule_checks(model_dir, tmp_path):
    with pytest.raises(ConfigError, match=r"needs actor\.rollout\.n >= 2 \(got 1\)"):
        load_config("grpo", [f"actor.model_path={model_dir}", "actor.rollout.n=1"])
    with pytest.raises(ConfigError, match=r"'algorithm\.adv_estimator' must be one of"):
        load_config("ppo", [f"actor.model_path={model_dir}", "algorithm.adv_estimator=ppo2"])
    missing = tmp_path / "missing.parquet"
    with pytest.raises(ConfigError, match=rf"data\.train_files': file '{missing}' does not exist"):
        load_config("ppo", [f"actor.model_path={model_dir}", f"data.train_files=[{missing}]"])
    with pytest.raises(ConfigError, match=r"'actor\.model_path' is required"):
        load_config("ppo", [])
    with pytest.raises(ConfigError, match="key=value"):
        load_config("ppo", ["actor.model_path"])
    with pytest.raises(
        ConfigError, match=r"resources\.actor_workers=2 must divide both the trajectories per step"
    ):
        load_config(
            "ppo", [f"actor.model_path={model_dir}", "resources.actor_workers=2", "data.train_batch_size=3"]
        )
    with pytest.raises(ConfigError, match="preset 'nope' not found"):
        load_config("nope", [])


def test_keeping_the_best_checkpoint_needs_a_validation_metric_and_validation(model_dir, tmp_path):
    val = tmp_path / "val.jsonl"
    val.write_text("{}\n")
    base = [f"actor.model_path={model_dir}", f"data.val_files=[{val}]", "trainer.test_freq=2"]
    cfg = load_config("grpo", [*base, "trainer.keep_best_by=val/all/f1"])
    assert cfg.trainer.keep_best_by == "val/all/f1"
    with pytest.raises(ConfigError, match=r"'trainer\.keep_best_by' must name a validation metric.*got 'f1'"):
        load_config("grpo", [*base, "trainer.keep_best_by=f1"])
    with pytest.raises(
        ConfigError, match=r"keep_best_by needs validation during training: trainer\.test_freq >= 1"
    ):
        load_config("grpo", [*base, "trainer.test_freq=0", "trainer.keep_best_by=val/all/em"])


def test_skipping_the_old_log_prob_pass_is_refused_wherever_pi_old_would_differ(model_dir):
    # grpo preset: 8 prompts x 5 samples a step
    one_step = [
        f"actor.model_path={model_dir}",
        "actor.skip_old_log_prob=true",
        "actor.update.mini_batch_size=40",
    ]
    assert load_config("grpo", one_step).actor.skip_old_log_prob
    refused = {
        "actor.update.epochs=2": r"actor\.update\.epochs=2 \(needs 1\)",
        "actor.update.mini_batch_size=16": r"mini_batch_size=16 splits a step's 40 trajectories",
        "trainer.max_staleness=1": r"trainer\.max_staleness > 0",
        "trainer.one_step_off_policy=true": r"trainer\.max_staleness > 0",
        "algorithm.use_kl_in_reward=true": r"algorithm\.use_kl_in_reward=true",
    }
    for override, reason in refused.items():
        with pytest.raises(ConfigError, match=r"actor\.skip_old_log_prob=true needs .*" + reason):
            load_config("grpo", [*one_step, override])


def test_tensor_parallel_rollout_needs_vllm_and_enough_gpus_per_rank(model_dir):
    base = [f"actor.model_path={model_dir}", "actor.rollout.tensor_parallel_size=2"]
    with pytest.raises(ConfigError, match=r"tensor_parallel_size=2 needs a vLLM engine"):
        load_config("ppo", base)
    with pytest.raises(ConfigError, match=r"num_gpus_per_worker \(1\) must be at least 2"):
        load_config("ppo", [*base, "actor.rollout.engine=vllm-async", "resources.num_gpus_per_worker=1"])
    config = load_config("ppo", [*base, "actor.rollout.engine=vllm-async", "resources.num_gpus_per_worker=2"])
    assert config.actor.rollout.tensor_parallel_size == 2


def test_yaml_file_preset_with_unknown_key_is_rejected(tmp_path, model_dir):
    bad = tmp_path / "mine.yaml"
    bad.write_text("actor:\n  optim:\n    learning_rate: 1.0\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'actor\.optim\.learning_rate'"):
        load_config(bad, [f"actor.model_path={model_dir}"])


def test_a_renamed_key_names_its_new_place(model_dir):
    with pytest.raises(ConfigError, match=r"'critic.ppo_epochs' \(it is now 'critic.update.epochs'\)"):
        load_config("ppo", [f"actor.model_path={model_dir}", "critic.ppo_epochs=2"])


def test_each_role_has_its_own_update_schedule(model_dir):
    cfg = load_config(
        "ppo",
        [
            f"actor.model_path={model_dir}",
            "critic.update.shuffle=false",
            "critic.update.use_dynamic_bsz=true",
            "reward.micro_batch_size=2",
        ],
    )
    assert cfg.critic.update.shuffle is False and cfg.actor.update.shuffle is True
    assert cfg.critic.update.use_dynamic_bsz and not cfg.actor.update.use_dynamic_bsz
    assert cfg.reward.micro_batch_size == 2


def test_scale_overlays_merge_after_the_algorithm_preset(model_dir):
    gpu = load_config(["grpo", "scale_gpu"], [f"actor.model_path={model_dir}"])
    assert gpu.algorithm.adv_estimator == "grpo" and gpu.actor.rollout.n == 5  # from grpo
    assert gpu.data.train_batch_size == 512 and gpu.actor.update.mini_batch_size == 256  # from scale_gpu
    assert gpu.actor.rollout.engine == "vllm" and gpu.trainer.device == "cuda"
    cpu = load_config(["ppo", "scale_cpu"], [f"actor.model_path={model_dir}", "data.train_batch_size=4"])
    assert cpu.data.max_response_length == 384 and cpu.data.train_batch_size == 4  # overrides win


def test_choice_errors_list_the_owners_choices(model_dir):
    from agentrl.agent.schedules import SCHEDULES
    from agentrl.models.optim import LR_SCHEDULES

    with pytest.raises(ConfigError) as error:
        load_config(
            "ppo",
            [
                f"actor.model_path={model_dir}",
                "actor.rollout.schedule=eager",
                "critic.optim.lr_schedule=step",
            ],
        )
    assert str(list(SCHEDULES)) in str(error.value) and str(list(LR_SCHEDULES)) in str(error.value)


def test_a_bad_choice_in_any_literal_field_is_named_with_its_choices_and_a_suggestion(model_dir):
    cases = {
        "actor.rollout.engine=vlm": r"'actor\.rollout\.engine' must be one of \['hf', 'vllm', 'vllm-async'\],"
        r" got 'vlm' \(did you mean 'vllm'\?\)",
        "resources.strategy=fsd": r"'resources\.strategy' must be one of \['dp', 'fsdp'\], got 'fsd'",
        "critic.compute_dtype=bf16": r"'critic\.compute_dtype' must be one of .*'bfloat16'.*got 'bf16'",
        "trainer.logger=[console,tensorbord]": r"'trainer\.logger\[1\]' must be one of .*got 'tensorbord' "
        r"\(did you mean 'tensorboard'\?\)",
    }
    for override, message in cases.items():
        with pytest.raises(ConfigError, match=message):
            load_config("ppo", [f"actor.model_path={model_dir}", override])


def test_a_config_built_in_code_gets_its_literal_fields_checked_too(model_dir):
    from agentrl.config import validate_config

    cfg = ExperimentConfig()
    cfg.actor.model_path = model_dir
    cfg.actor.rollout.schedule = "lockstp"  # never passed through OmegaConf, so only validate_config sees it
    cfg.actor.optim.lr_schedule = "cosine"
    with pytest.raises(ConfigError) as info:
        validate_config(cfg)
    assert "'actor.rollout.schedule' must be one of ['concurrent', 'lockstep'], got 'lockstp'" in str(
        info.value
    )
    assert "lr_schedule" not in str(info.value)


def test_every_owner_derives_its_choices_from_the_schema():
    from typing import get_args

    from agentrl.agent.schedules import SCHEDULES
    from agentrl.agent.tool_dispatch import TOOL_ERROR_POLICIES
    from agentrl.cluster.fit import PLACEMENTS, RAY_STRATEGIES
    from agentrl.config import schema
    from agentrl.engines import ENGINE_KINDS
    from agentrl.models.loading import DTYPES
    from agentrl.models.optim import LR_SCHEDULES
    from agentrl.tool_identity import FORMAT_TRAITS
    from agentrl.trainer.tracking import LOGGERS
    from agentrl.workers.base import DEVICES, STRATEGIES

    owned = {
        schema.Schedule: SCHEDULES,
        schema.ToolErrorPolicy: TOOL_ERROR_POLICIES,
        schema.EngineKind: ENGINE_KINDS,
        schema.DtypeName: tuple(DTYPES),
        schema.LrSchedule: LR_SCHEDULES,
        schema.ToolFormat: tuple(FORMAT_TRAITS),
        schema.PlacementKind: PLACEMENTS,
        schema.PlacementStrategy: tuple(RAY_STRATEGIES),
        schema.LoggerName: LOGGERS,
        schema.Device: DEVICES,
        schema.Strategy: STRATEGIES,
    }
    for literal, choices in owned.items():
        assert tuple(choices) == get_args(literal)


def test_the_config_package_imports_nothing_above_it():
    import subprocess
    import sys

    # A fresh interpreter: importing the config package pulls in nothing above it, not even torch
    # (core's registries are read when a config is checked), so data scripts stay light.
    code = (
        "import sys, agentrl.config; "
        "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('agentrl.')}),"
        " 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['config'] False", out


TWO_TOOLS = (
    "actor.rollout.tools=[{class_path: agentrl.tools.retrieval.SearchTool, "
    "options: {url: 'http://a:1/r'}}, {class_path: agentrl.tools.calculator.CalculatorTool}]"
)


def test_one_element_of_the_tools_list_is_overridden_by_its_index(model_dir):
    cfg = load_config(
        "ppo",
        [
            f"actor.model_path={model_dir}",
            TWO_TOOLS,
            "actor.rollout.tools[1].options.max_exponent=7",
            "actor.rollout.tools[0].options.topk=5",
        ],
    )
    search, calculator = cfg.actor.rollout.tools
    assert search.options == {"url": "http://a:1/r", "topk": 5}  # merged into the element's options
    assert calculator.class_path.endswith("CalculatorTool") and calculator.options == {"max_exponent": 7}


def test_an_index_past_the_list_is_refused_with_the_lists_length(model_dir):
    with pytest.raises(ConfigError, match=r"index 2 is out of range: 'actor\.rollout\.tools' has 2 element"):
        load_config(
            "ppo", [f"actor.model_path={model_dir}", TWO_TOOLS, "actor.rollout.tools[2].options.url=x"]
        )
    with pytest.raises(ConfigError, match=r"'actor\.rollout\.n' is not a list"):
        load_config("ppo", [f"actor.model_path={model_dir}", "actor.rollout.n[0]=3"])


def test_a_dotted_index_or_a_typo_in_an_element_names_the_bracketed_key(model_dir):
    with pytest.raises(ConfigError, match=r"in brackets: 'actor\.rollout\.tools\[1\]\.options\.url'"):
        load_config("ppo", [f"actor.model_path={model_dir}", "actor.rollout.tools.1.options.url=x"])
    with pytest.raises(ConfigError, match=r"did you mean 'actor\.rollout\.tools\[0\]\.options'\?"):
        load_config("ppo", [f"actor.model_path={model_dir}", "actor.rollout.tools[0].optons.url=x"])


def test_the_rollout_section_of_a_run_config_is_read_without_its_files(tmp_path):
    from agentrl.config.loader import load_rollout, to_yaml

    cfg = ExperimentConfig()
    cfg.data.train_files = ["/nowhere/train.parquet"]  # a run's files need not exist where it is read
    cfg.actor.rollout.tool_format = "hermes"
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    assert load_rollout(tmp_path / "config.yaml") == cfg.actor.rollout
    (tmp_path / "bad.yaml").write_text("actor:\n  rollout:\n    max_trns: 3\n")
    with pytest.raises(
        ConfigError,
        match=r"unknown config key 'actor\.rollout\.max_trns' \(did you mean 'actor\.rollout\.max_turns'",
    ):
        load_rollout(tmp_path / "bad.yaml")
    (tmp_path / "none.yaml").write_text("trainer: {}\n")
    with pytest.raises(ConfigError, match="no actor.rollout section"):
        load_rollout(tmp_path / "none.yaml")


def test_dynamic_sampling_and_the_overlong_options_are_checked_by_key(model_dir):
    grpo = ["algorithm.dynamic_sampling.enable=true", f"actor.model_path={model_dir}"]
    cfg = load_config("grpo", grpo)
    assert cfg.algorithm.dynamic_sampling.enable and cfg.algorithm.dynamic_sampling.max_rounds == 4
    assert not load_config("grpo", [f"actor.model_path={model_dir}"]).algorithm.dynamic_sampling.enable
    with pytest.raises(
        ConfigError, match=r"dynamic_sampling\.enable drops groups.*adv_estimator=gae has none"
    ):
        load_config("ppo", grpo)
    by_step = "dynamic_sampling.enable with trainer.max_staleness > 0 needs trainer.take_groups=first_done"
    by_step = re.escape(by_step)
    with pytest.raises(ConfigError, match=by_step):
        load_config("grpo", [*grpo, "trainer.max_staleness=1", "actor.skip_old_log_prob=false"])
    by_groups = ["trainer.max_staleness=2", "trainer.take_groups=first_done", "resources.rollout_workers=1"]
    by_groups.append("trainer.partial_rollout=continue")
    cfg = load_config("grpo", [*grpo, *by_groups, "actor.skip_old_log_prob=false"])
    assert cfg.algorithm.dynamic_sampling.enable and cfg.trainer.take_groups == "first_done"
    with pytest.raises(ConfigError, match=r"'algorithm\.dynamic_sampling\.max_rounds' must be >= 1, got 0"):
        load_config("grpo", [*grpo, "algorithm.dynamic_sampling.max_rounds=0"])
    budget = ["data.max_response_length=100", f"actor.model_path={model_dir}"]
    with pytest.raises(
        ConfigError, match=r"'reward\.overlong_buffer' must be in \[0, data\.max_response_length=100\)"
    ):
        load_config("grpo", [*budget, "reward.overlong_buffer=100"])
    with pytest.raises(ConfigError, match=r"'reward\.overlong_penalty_factor' must be >= 0"):
        load_config("grpo", [*budget, "reward.overlong_penalty_factor=-1"])
    with pytest.raises(ConfigError, match=r"'trainer\.alarm_after_steps' must be >= 0"):
        load_config("grpo", [*budget, "trainer.alarm_after_steps=-2"])
    with pytest.raises(ConfigError, match=r"'trainer\.time_budget_minutes' must be > 0 or null, got 0"):
        load_config("grpo", [*budget, "trainer.time_budget_minutes=0"])


def test_the_staleness_bound_and_the_importance_options_are_checked_by_key(model_dir):
    base = [f"actor.model_path={model_dir}"]
    assert staleness_bound(load_config("ppo", base).trainer) == 0
    assert staleness_bound(load_config("ppo", [*base, "trainer.max_staleness=1"]).trainer) == 1
    # a config written before max_staleness: one_step_off_policy is its bound of 1
    assert staleness_bound(load_config("ppo", [*base, "trainer.one_step_off_policy=true"]).trainer) == 1
    with pytest.raises(ConfigError, match=r"'trainer\.max_staleness' must be >= 0, got -1"):
        load_config("ppo", [*base, "trainer.max_staleness=-1"])
    with pytest.raises(ConfigError, match=r"trainer\.max_staleness=2 needs resources\.rollout_workers >= 1"):
        load_config("ppo", [*base, "trainer.max_staleness=2"])
    ahead = [*base, "trainer.max_staleness=3", "resources.rollout_workers=2"]
    assert load_config("ppo", [*ahead, "trainer.partial_rollout=continue"]).resources.rollout_workers == 2
    with pytest.raises(ConfigError, match=r"rollout_workers > 0 with trainer\.max_staleness > 0 .*continue"):
        load_config("ppo", ahead)
    continued = [*ahead, "trainer.partial_rollout=continue"]
    with pytest.raises(ConfigError, match=r"rollout_workers > 0 needs actor\.rollout\.engine=hf.*'vllm'"):
        load_config("ppo", [*continued, "actor.rollout.engine=vllm"])
    with pytest.raises(ConfigError, match=r"rollout_workers=3 must divide the step's \d+ trajectories"):
        uneven = ["resources.rollout_workers=3", "data.train_batch_size=4", "actor.rollout.n=2"]
        load_config("ppo", [*base, *uneven])
    with pytest.raises(ConfigError, match=r"'resources\.rollout_workers' must be >= 0, got -1"):
        load_config("ppo", [*base, "resources.rollout_workers=-1"])
    with pytest.raises(ConfigError, match=r"one_step_off_policy=true is trainer\.max_staleness=1, but .*3"):
        load_config("ppo", [*base, "trainer.one_step_off_policy=true", "trainer.max_staleness=3"])
    # groups taken as they finish: on rollout workers, with a bound to take them within
    groups = [*continued, "trainer.take_groups=first_done"]
    assert load_config("ppo", [*groups, "trainer.stale_group=drop"]).trainer.stale_group == "drop"
    with pytest.raises(ConfigError, match=r"take_groups=first_done needs resources\.rollout_workers >= 1"):
        load_config("ppo", [*base, "trainer.max_staleness=1", "trainer.take_groups=first_done"])
    with pytest.raises(ConfigError, match=r"take_groups=first_done needs trainer\.max_staleness >= 1"):
        load_config("ppo", [*base, "resources.rollout_workers=2", "trainer.take_groups=first_done"])
    with pytest.raises(ConfigError, match=r"stale_group=drop needs trainer\.take_groups=first_done"):
        load_config("ppo", [*continued, "trainer.stale_group=drop"])
    with pytest.raises(ConfigError, match=r"trainer\.take_groups"):
        load_config("ppo", [*continued, "trainer.take_groups=fastest"])
    assert load_config("ppo", [*groups, "trainer.groups_ahead=2"]).trainer.groups_ahead == 2
    with pytest.raises(ConfigError, match=r"'trainer\.groups_ahead' must be between 1 and .*=3 .*got 4"):
        load_config("ppo", [*groups, "trainer.groups_ahead=4"])
    with pytest.raises(ConfigError, match=r"groups_ahead needs trainer\.take_groups=first_done"):
        load_config("ppo", [*continued, "trainer.groups_ahead=2"])
    reject = [*base, "algorithm.is_mode=reject", "algorithm.is_level=sequence"]
    assert load_config("ppo", [*reject, "algorithm.tis_cap=1.5"]).algorithm.is_level == "sequence"
    with pytest.raises(ConfigError, match=r"'algorithm\.tis_cap' must be > 0 \(>= 1 with .*reject.*got 0\.5"):
        load_config("ppo", [*reject, "algorithm.tis_cap=0.5"])
    with pytest.raises(ConfigError, match=r"algorithm\.is_mode"):
        load_config("ppo", [*base, "algorithm.is_mode=clip"])


def test_the_importance_levels_and_modes_of_core_are_the_schemas():
    assert get_args(ImportanceLevel) == IS_LEVELS and get_args(ImportanceMode) == IS_MODES
