"""Aggregated metrics and their markdown table: bootstrap intervals and the extracted share."""

from __future__ import annotations

import pytest

from agentrl.eval.report import aggregate, flat_metrics, markdown_table
from agentrl.eval.stats import bootstrap_ci


def record(dataset: str, em: float, f1: float, answered: bool, extracted: bool) -> dict:
    return {
        "dataset": dataset,
        "data_source": dataset,
        "em": em,
        "f1": f1,
        "cover_em": em,
        "answered": answered,
        "extracted": extracted,
        "num_turns": 1,
    }


RECORDS = [
    record("nq", 1.0, 1.0, True, False),
    record("nq", 0.0, 0.5, False, True),
    record("nq", 1.0, 1.0, False, True),
    record("nq", 0.0, 0.0, False, False),
    record("hotpotqa", 1.0, 1.0, True, False),
]


def test_aggregate_reports_bootstrap_intervals_of_em_and_f1_per_dataset():
    m = aggregate(RECORDS)
    nq = m["nq"]
    assert nq["n"] == 4 and nq["em"] == 0.5 and nq["f1"] == 0.625
    assert (nq["em"], nq["em_lo"], nq["em_hi"]) == bootstrap_ci([1.0, 0.0, 1.0, 0.0])
    assert nq["em_lo"] < nq["em"] < nq["em_hi"] and nq["f1_lo"] < nq["f1"] < nq["f1_hi"]
    assert m["hotpotqa"]["em_lo"] == m["hotpotqa"]["em_hi"] == 1.0  # one question: a point
    assert "cover_em_lo" not in nq  # intervals only for EM and F1
    assert aggregate(RECORDS) == m  # seeded


def test_aggregate_separates_extracted_predictions_from_accepted_tags():
    nq = aggregate(RECORDS)["nq"]
    assert nq["answer_rate"] == 0.25 and nq["extracted"] == 0.5


def test_the_table_shows_em_and_f1_with_their_interval():
    table = markdown_table([{"dataset": "nq", **aggregate(RECORDS)["nq"]}], ["dataset"])
    header, _, row = table.splitlines()
    assert "| EM [95% CI] | F1 [95% CI] | cover-EM | answered | extracted |" in header
    nq = aggregate(RECORDS)["nq"]
    assert f"| 0.500 [{nq['em_lo']:.3f}, {nq['em_hi']:.3f}] | 0.625 [{nq['f1_lo']:.3f}," in row
    assert row.count("[") == 2  # cover-EM and the rest stay plain


def test_rows_without_intervals_render_as_before():
    old = {"dataset": "nq", "n": 4, "em": 0.5, "f1": 0.625, "answer_rate": 0.25}
    table = markdown_table([old], ["dataset"])
    assert table.splitlines()[0] == "| dataset | n | EM | F1 | answered |"
    assert table.splitlines()[2] == "| nq | 4 | 0.500 | 0.625 | 0.250 |"


def test_validation_metrics_stay_means_without_intervals():
    flat = flat_metrics(RECORDS, "val")
    assert flat["val/all/em"] == pytest.approx(0.6) and flat["val/all/extracted"] == pytest.approx(0.4)
    assert not any(k.endswith(("_lo", "_hi")) for k in flat)


def test_each_tools_calls_are_counted_per_group_beside_searches():
    records = [
        {**RECORDS[0], "num_searches": 2, "tool_calls": {"search": 2, "lookup": 1}},
        {**RECORDS[1], "num_searches": 0, "tool_calls": {}},
        {**RECORDS[4], "num_searches": 1, "tool_calls": {"search": 1}},
    ]
    m = aggregate(records, tools=("search", "lookup", "calculate"))
    assert m["nq"]["searches"] == 1.0 and m["nq"]["tool_calls/search"] == 1.0
    assert m["nq"]["tool_calls/lookup"] == 0.5 and m["hotpotqa"]["tool_calls/lookup"] == 0.0
    assert m["nq"]["tool_calls/calculate"] == 0.0  # a tool of the run that nobody called
    flat = flat_metrics(records, "val")  # without the run's tools: the tags some record called
    assert flat["val/all/tool_calls/search"] == 1.0 and flat["val/all/tool_calls/lookup"] == pytest.approx(
        1 / 3
    )
    assert flat["val/hotpotqa/tool_calls/lookup"] == 0.0 and "val/all/tool_calls/calculate" not in flat
    assert flat["val/all/searches"] == 1.0


def test_records_without_tool_calls_add_no_tool_metrics():
    assert not any(k.startswith("tool_calls/") for k in aggregate(RECORDS)["nq"])
