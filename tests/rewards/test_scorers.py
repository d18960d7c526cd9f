"""Format-aware score table, the data-source registry, user scorers and batch scoring."""

from __future__ import annotations

import math
import textwrap

import pytest

from agentrl.rewards import (
    FormatScorer,
    FormatValues,
    MatchScorer,
    RewardSettings,
    ScoreInput,
    extract_answer,
    load_scorer,
    register_scorer,
    resolve_scorer,
    score_batch,
)
from agentrl.tool_identity import ToolIdentity

WELL_RIGHT = (
    "<think>t</think><search>q</search><information>Doc 1 Quenby</information>"
    "<think>t</think><answer> Quenby </answer>"
)
WELL_WRONG = "<think>t</think><answer> Blem </answer>"
WELL_WRONG_HIT = WELL_RIGHT.replace("<answer> Quenby", "<answer> Blem")
ILL_RIGHT = "<answer> Quenby </answer>"
ILL_WRONG = "Blem <answer> Blem </answer>"
NO_ANSWER = "<think>t</think><search>q</search>"
GT = {"target": ["Quenby"]}

TABLE = FormatValues(
    correct_well_formed=1.0,
    correct_ill_formed=0.7,
    wrong_well_formed=0.3,
    wrong_ill_formed=0.05,
    no_answer=-0.5,
    retrieval_bonus=0.11,
)


def answers_of(responses: list[str]) -> list[str | None]:
    """What a rollout would have accepted for these hand-written single-turn responses."""
    return [extract_answer(r) for r in responses]


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (WELL_RIGHT, 1.0),  # retrieval hit but correct: no bonus on top
        (ILL_RIGHT, 0.7),
        (WELL_WRONG, 0.3),
        (WELL_WRONG_HIT, 0.3 + 0.11),
        (ILL_WRONG, 0.05),
        (NO_ANSWER, -0.5),
    ],
)
def test_format_score_table(response: str, expected: float) -> None:
    out = FormatScorer("em", TABLE)(ScoreInput.from_text(response, GT, "nq"))
    assert out.score == pytest.approx(expected)


def test_format_score_with_f1_interpolates() -> None:
    # F1 of "Quenby town" vs "Quenby" = 2/3; well-formed row: 0.3 + 2/3 * (1 - 0.3)
    out = FormatScorer("f1", TABLE)(ScoreInput.from_text("<think>t</think><answer>Quenby town</answer>", GT))
    assert out.score == pytest.approx(0.3 + (2 / 3) * 0.7)


def test_metrics_reported() -> None:
    out = MatchScorer("em")(ScoreInput.from_text(WELL_WRONG_HIT, GT))
    assert out.score == 0.0
    assert out.metrics == {
        "em": 0.0,
        "f1": 0.0,
        "cover_em": 0.0,
        "has_answer": 1.0,
        "well_formed": 1.0,
        "retrieval_hit": 1.0,
        "num_searches": 1.0,
        "tool_calls/search": 1.0,
    }


def test_a_run_with_a_second_tool_scores_its_calls_as_well_formed_and_counts_each_tool() -> None:
    lookup = "<think>t</think><lookup>Zorvia</lookup><information>Doc 1 Quenby</information>"
    response = f"{lookup}<think>t</think><answer> Quenby </answer>"
    tools = ToolIdentity.of_tags(("search", "lookup"))
    scorer = FormatScorer("em", TABLE)
    out = scorer(ScoreInput.from_text(response, GT, tools=tools))
    assert out.score == 1.0 and out.metrics["well_formed"] == 1.0
    assert out.metrics["tool_calls/lookup"] == 1.0 and out.metrics["tool_calls/search"] == 0.0
    assert out.metrics["num_searches"] == 0.0
    # a run whose tools do not include <lookup> reads it as text outside the protocol
    assert scorer(ScoreInput.from_text(response, GT)).score == pytest.approx(TABLE.correct_ill_formed)


SEARCH_AND_CALCULATE = ToolIdentity.of_tags(("search", "calculate"))


def test_score_batch_passes_the_runs_tool_identity_to_every_scorer() -> None:
    call = "<calculate>2+3</calculate><information>5</information>"
    response = f"<think>t</think>{call}<think>t</think><answer>5</answer>"
    cfg = {"format_score": True}
    scores, metrics = score_batch([response], [{"target": ["5"]}], ["nq"], None, cfg, answers=["5"])
    assert scores == [pytest.approx(0.8)] and metrics["well_formed"] == [0.0]
    scores, metrics = score_batch(
        [response], [{"target": ["5"]}], ["nq"], None, cfg, answers=["5"], tools=SEARCH_AND_CALCULATE
    )
    assert scores == [1.0] and metrics["well_formed"] == [1.0]
    assert metrics["tool_calls/calculate"] == [1.0] and metrics["tool_calls/search"] == [0.0]


def test_registry_defaults_and_fallback() -> None:
    for source in ("nq", "hotpotqa", "bamboogle", "synthetic_world"):
        assert resolve_scorer(source) == MatchScorer("em")
    assert resolve_scorer("never-heard-of-it", fallback_metric="f1") == MatchScorer("f1")
    assert resolve_scorer("nq", per_source={"nq": "cover_em"}) == MatchScorer("cover_em")
    assert isinstance(resolve_scorer("nq", use_format=True), FormatScorer)


def test_register_refuses_silent_overwrite() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_scorer("nq", "f1")
    with pytest.raises(ValueError, match="neither a built-in metric"):
        register_scorer("brand_new_source", "bleu")


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_scorers.py").write_text(
        textwrap.dedent(
            """
            from agentrl.rewards import ScoreOutput

            def length_penalty(inp):
                return -len(inp.response_text) / 100, {"chars": len(inp.response_text)}

            def plain(inp):
                return 2

            def as_output(inp):
                return ScoreOutput(0.5, {"src_is_x": float(inp.data_source == "x")})

            def broken(inp):
                return "high"

            NOT_CALLABLE = 3
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_scorers"


def test_import_path_scorer(user_module: str) -> None:
    out = load_scorer(f"{user_module}:length_penalty")(ScoreInput.from_text("x" * 30, GT))
    assert out.score == pytest.approx(-0.3) and out.metrics == {"chars": 30.0}
    assert load_scorer(f"{user_module}:plain")(ScoreInput.from_text("", GT)).score == 2.0
    assert load_scorer(f"{user_module}:as_output")(ScoreInput.from_text("", GT, "x")).metrics == {
        "src_is_x": 1.0
    }


@pytest.mark.parametrize(
    ("path", "error", "message"),
    [
        (
            "no_such_pkg_xyz.mod:fn",
            ImportError,
            "scorer 'no_such_pkg_xyz.mod:fn': cannot import module 'no_such_pkg_xyz.mod'",
        ),
        (
            "my_scorers:missing",
            ImportError,
            "scorer 'my_scorers:missing': module 'my_scorers' has no attribute 'missing'",
        ),
        ("my_scorers:NOT_CALLABLE", TypeError, "scorer 'my_scorers:NOT_CALLABLE' is not callable"),
        ("my_scorers.length_penalty", ValueError, "must look like 'pkg.module:function'"),
    ],
)
def test_import_path_errors_name_the_path(user_module: str, path: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(")):
        load_scorer(path)


def test_user_scorer_bad_return_type(user_module: str) -> None:
    with pytest.raises(TypeError, match="my_scorers:broken' returned str"):
        load_scorer("my_scorers:broken")(ScoreInput.from_text("", GT))


def test_score_batch_mixed_sources_and_override(user_module: str) -> None:
    responses = [WELL_RIGHT, ILL_WRONG, NO_ANSWER]
    gts = [GT, GT, {"target": ["Blem"]}]
    scores, metrics = score_batch(
        responses,
        gts,
        ["nq", "synthetic_world", "popqa"],
        [None, {}, {"index": 2}],
        answers=answers_of(responses),
    )
    assert scores == [1.0, 0.0, 0.0]
    assert metrics["well_formed"] == [1.0, 0.0, 0.0] and metrics["has_answer"] == [1.0, 1.0, 0.0]

    # a user scorer named in the config replaces the registry for every source
    scores, metrics = score_batch(
        responses,
        gts,
        ["nq", "nq", "x"],
        None,
        {"scorer": f"{user_module}:as_output"},
        answers=answers_of(responses),
    )
    assert scores == [0.5, 0.5, 0.5] and metrics == {"src_is_x": [0.0, 0.0, 1.0]}


def test_score_batch_format_config_search_r1_names() -> None:
    cfg = {
        "format_score": True,
        "structure_format_score": 0.2,
        "final_format_score": 0.1,
        "retrieval_score": 0.05,
    }
    responses = [WELL_RIGHT, ILL_RIGHT, WELL_WRONG, WELL_WRONG_HIT, ILL_WRONG, NO_ANSWER]
    scores, _ = score_batch(responses, [GT] * 6, ["nq"] * 6, None, cfg, answers=answers_of(responses))
    assert scores == pytest.approx([1.0, 0.8, 0.2, 0.25, 0.1, 0.0])


def test_score_batch_nan_for_missing_custom_metrics(user_module: str) -> None:
    cfg = RewardSettings(by_data_source={"a": f"{user_module}:length_penalty"})
    responses = ["xx", "<think>t</think><answer>Quenby</answer>"]
    _, metrics = score_batch(responses, [GT, GT], ["a", "nq"], None, cfg, answers=answers_of(responses))
    assert metrics["chars"][0] == 2.0 and math.isnan(metrics["chars"][1])
    assert math.isnan(metrics["em"][0]) and metrics["em"][1] == 1.0


def test_score_batch_input_errors() -> None:
    with pytest.raises(ValueError, match="data_sources has 1 items but responses has 2"):
        score_batch(["a", "b"], [GT, GT], ["nq"], answers=[None, None])
    with pytest.raises(ValueError, match="unknown reward config key"):
        score_batch(["a"], [GT], ["nq"], None, {"fromat_score": True}, answers=[None])
    with pytest.raises(
        ValueError, match=r"sample 1 \(data_source='nq'\).*ground_truth\['target'\] must be a non-empty"
    ):
        score_batch(["a", "b"], [GT, {"target": []}], ["nq", "nq"], answers=[None, None])
    with pytest.raises(ValueError, match="sample 0.*no 'target' key"):
        score_batch(["a"], [{"answer": ["x"]}], ["nq"], answers=[None])


def test_settings_from_attribute_object() -> None:
    class TrainerRewardConfig:  # e.g. the trainer's dataclass or an OmegaConf node
        scorer = None
        format_score = True
        structure_format_score = 0.3
        final_format_score = 0.0
        retrieval_score = 0.0
        reward_model_path = None

    scores, _ = score_batch(
        [WELL_WRONG], [GT], ["nq"], None, TrainerRewardConfig(), answers=answers_of([WELL_WRONG])
    )
    assert scores == [pytest.approx(0.3)]
