"""QA jsonl -> Search-R1 rows: round trip on real data, schema, row errors, merged split."""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import islice
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentrl.data.qa import (
    INSTRUCTION_TEMPLATE,
    QADataError,
    load_qa_rows,
    make_prompt,
    read_question_records,
    sample_records,
    split_train_test,
    to_training_rows,
    write_rows,
)
from agentrl.data.world import Question, generate_world, oracle_text, oracle_trajectory, write_world
from agentrl.rewards import extract_answer, normalize_answer, score_batch

REPO = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "data" / script), *args], capture_output=True, text=True
    )


@pytest.fixture
def nq_slice(tmp_path: Path, shared_data: Path) -> Path:
    path = tmp_path / "nq_slice.jsonl"
    with (shared_data / "nq" / "test.jsonl").open(encoding="utf-8") as f:
        path.write_text("".join(islice(f, 200)), encoding="utf-8")
    return path


def test_prompt_template_structure() -> None:
    prompt = make_prompt("  who wrote hamlet ")
    assert prompt.endswith("Question: who wrote hamlet?\n")
    assert make_prompt("Is it?").endswith("Question: Is it?\n")
    for tag in (
        "<think>",
        "</think>",
        "<search> query </search>",
        "<information>",
        "</information>",
        "<answer> Beijing </answer>",
    ):
        assert tag in INSTRUCTION_TEMPLATE


def test_round_trip_on_real_nq_slice(nq_slice: Path, tmp_path: Path) -> None:
    out = tmp_path / "nq.parquet"
    proc = _run(
        "prepare_qa.py", "--input", str(nq_slice), "--source", "nq", "--split", "train", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    source = [json.loads(line) for line in nq_slice.read_text(encoding="utf-8").splitlines()]
    rows = load_qa_rows(out)
    assert len(rows) == len(source) == 200
    for i, (rec, row) in enumerate(zip(source, rows, strict=True)):
        assert row["id"] == rec["id"] and row["question"] == rec["question"]
        assert row["reward_model"] == {"style": "rule", "ground_truth": {"target": rec["golden_answers"]}}
        assert row["extra_info"] == {"split": "train", "index": i}
        assert row["data_source"] == "nq" and row["ability"] == "fact-reasoning"
        assert row["prompt"] == [{"role": "user", "content": make_prompt(rec["question"])}]
    # the jsonl path of the same rows reads back identically
    assert load_qa_rows(write_rows(rows, tmp_path / "nq.jsonl")) == rows
    # and raw question records convert to the same rows in memory
    assert load_qa_rows(nq_slice, split="train", data_source="nq") == rows


def test_schema_matches_search_r1_layout(nq_slice: Path, tmp_path: Path) -> None:
    out = write_rows(to_training_rows(read_question_records(nq_slice), "test", "nq"), tmp_path / "x.parquet")
    schema = pq.read_schema(out)
    # Search-R1's nq_search.py keeps the FlashRAG columns and adds five nested ones
    expected = {
        "id": pa.string(),
        "question": pa.string(),
        "golden_answers": pa.list_(pa.string()),
        "data_source": pa.string(),
        "prompt": pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])),
        "ability": pa.string(),
        "reward_model": pa.struct(
            [("style", pa.string()), ("ground_truth", pa.struct([("target", pa.list_(pa.string()))]))]
        ),
        "extra_info": pa.struct([("split", pa.string()), ("index", pa.int64())]),
    }
    assert schema.names == list(expected)
    for name, typ in expected.items():
        assert schema.field(name).type.equals(typ), name


def test_limit_is_a_seeded_sample_in_file_order() -> None:
    recs = [{"id": str(i), "question": f"q{i}", "golden_answers": ["a"]} for i in range(50)]
    a, b, c = sample_records(recs, 10, 1), sample_records(recs, 10, 1), sample_records(recs, 10, 2)
    assert a == b and a != c and len(a) == 10
    assert [int(r["id"]) for r in a] == sorted(int(r["id"]) for r in a)
    assert sample_records(recs, None) == recs


GOOD = '{"id": "q1", "question": "who?", "golden_answers": ["x"]}'


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"id": "q", "golden_answers": ["x"]}', "missing field 'question'"),
        ('{"id": "q", "question": "who?"}', "missing field 'golden_answers'"),
        ('{"question": "who?", "golden_answers": ["x"]}', "missing field 'id'"),
        (
            '{"id": "q", "question": 5, "golden_answers": ["x"]}',
            "field 'question' must be a non-empty string",
        ),
        (
            '{"id": "q", "question": "who?", "golden_answers": []}',
            "'golden_answers' must be a non-empty list of strings",
        ),
        (
            '{"id": "q", "question": "who?", "golden_answers": "x"}',
            "'golden_answers' must be a non-empty list of strings",
        ),
        (
            '{"id": "q", "question": "who?", "golden_answers": ["x", 3]}',
            "'golden_answers' must be a non-empty list",
        ),
        ('{"id": "q", "question": "who?", "golden_answers": ["x"]', "invalid JSON"),
        ('["not", "an", "object"]', "expected a JSON object"),
    ],
)
def test_bad_row_names_file_and_line(tmp_path: Path, bad_line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{GOOD}\n\n{GOOD}\n{bad_line}\n{GOOD}\n", encoding="utf-8")  # bad one is line 4
    with pytest.raises(QADataError) as info:
        read_question_records(path)
    assert str(info.value).startswith(f"{path}:4: ")
    assert message in str(info.value)
    with pytest.raises(QADataError, match=f"{path}:4: "):
        load_qa_rows(path, data_source="nq")
    proc = _run(
        "prepare_qa.py",
        "--input",
        str(path),
        "--source",
        "nq",
        "--split",
        "train",
        "--out",
        str(tmp_path / "o.parquet"),
    )
    assert proc.returncode == 1 and f"{path}:4: " in proc.stderr and message in proc.stderr
    assert not (tmp_path / "o.parquet").exists()


def test_bad_parquet_row_is_named(tmp_path: Path) -> None:
    rows = to_training_rows([{"id": "1", "question": "q", "golden_answers": ["a"]}] * 2, "test", "nq")
    rows[1]["reward_model"]["ground_truth"]["target"] = []
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(QADataError, match=r"bad.parquet: row 2: field 'reward_model.ground_truth.target'"):
        load_qa_rows(path)


def test_missing_data_source_is_named(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(GOOD + "\n", encoding="utf-8")
    with pytest.raises(QADataError, match=f"{path}:1: no 'dataset' field and no data_source"):
        load_qa_rows(path)


def test_split_groups_normalised_duplicates() -> None:
    recs = [
        {"id": str(i), "question": q, "golden_answers": ["a"]}
        for i, q in enumerate(["Who is X?", "who is x", "The who is X"] + [f"q {i}" for i in range(40)])
    ]
    for seed in range(5):
        train, test = split_train_test(recs, 0.5, seed)
        assert len(train) + len(test) == len(recs)
        keys_train = {normalize_answer(r["question"]) for r in train}
        assert not keys_train & {normalize_answer(r["question"]) for r in test}


def test_merged_nq_hotpotqa_split(tmp_path: Path, shared_data: Path) -> None:
    proc = _run(
        "make_nq_hotpotqa.py", "--out", str(tmp_path / "m"), "--shared", str(shared_data), "--seed", "3"
    )
    assert proc.returncode == 0, proc.stderr
    train, test = (
        load_qa_rows(tmp_path / "m" / "train.parquet"),
        load_qa_rows(tmp_path / "m" / "test.parquet"),
    )
    assert len(train) + len(test) == 3610 + 1325
    assert {r["data_source"] for r in test} == {r["data_source"] for r in train} == {"nq", "hotpotqa"}
    assert {r["extra_info"]["split"] for r in train} == {"train"}
    assert not {normalize_answer(r["question"]) for r in train} & {
        normalize_answer(r["question"]) for r in test
    }
    assert 0.15 < len(test) / (len(train) + len(test)) < 0.25


def test_synthetic_world_through_the_pipeline(tmp_path: Path) -> None:
    paths = write_world(
        generate_world(seed=1, num_people=20, num_companies=8, num_countries=4), tmp_path / "w"
    )
    rows = load_qa_rows(paths["test"])  # data_source comes from the records' "dataset"
    assert {r["data_source"] for r in rows} == {"synthetic_world"}
    records = {
        json.loads(line)["question"]: json.loads(line) for line in paths["test"].read_text().splitlines()
    }
    responses = []
    for row in rows:
        q = Question.from_json(records[row["question"]])
        responses.append(
            oracle_text(oracle_trajectory(q), ["<information>Doc 1(Title: x) y</information>"] * q.hop)
        )
    scores, metrics = score_batch(
        responses,
        [r["reward_model"]["ground_truth"] for r in rows],
        [r["data_source"] for r in rows],
        None,
        {"format_score": True},
        answers=[extract_answer(r) for r in responses],
    )
    assert scores == [1.0] * len(rows) and all(metrics["well_formed"])
