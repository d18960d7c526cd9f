"""Corpus validation (line numbers, no silent skips) and the O(1) Arrow document store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from retriever.build_index import ensure_docstore
from retriever.build_index import main as build_main
from retriever.corpus import CorpusFormatError, DocStore, Passage, iter_corpus, write_docstore
from retriever.index import read_manifest

GOOD = json.dumps({"id": "d0", "contents": '"Title A"\nsome text'})


@pytest.mark.parametrize(
    ("bad_line", "expected"),
    [
        ("{not json", "invalid JSON"),
        ('["a list"]', "expected a JSON object"),
        ('{"contents": "x"}', "missing field 'id'"),
        ('{"id": "d1"}', "missing field 'contents'"),
        ('{"id": "", "contents": "x"}', "field 'id'"),
        ('{"id": "d1", "contents": 7}', "field 'contents'"),
        ('{"id": "d1", "contents": "   "}', "field 'contents'"),
        ("", "blank line"),
    ],
)
def test_malformed_line_is_rejected_with_its_line_number(
    tmp_path: Path, bad_line: str, expected: str
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(GOOD + "\n" + bad_line + "\n" + GOOD + "\n")
    with pytest.raises(CorpusFormatError) as info:
        list(iter_corpus(path))
    assert info.value.line_no == 2
    assert expected in str(info.value)
    assert f"{path}:2:" in str(info.value)


def test_build_index_cli_reports_the_bad_line_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(GOOD + "\n" + GOOD + "\n" + '{"id": "x"}\n')
    rc = build_main(["--corpus", str(path), "--backend", "bm25", "--out", str(tmp_path / "idx"), "--quiet"])
    assert rc == 2
    err = capsys.readouterr().err
    assert ":3:" in err and "contents" in err


def test_docstore_roundtrip_across_record_batches(tmp_path: Path) -> None:
    passages = [Passage(f"id-{i}", f'"T{i}"\ntext {i} ü') for i in range(53)]
    assert write_docstore(iter(passages), tmp_path, batch_rows=7) == 53
    store = DocStore(tmp_path)
    assert len(store) == 53
    for i in (0, 6, 7, 8, 48, 49, 52):  # batch boundaries and the short last batch
        assert store.get(i) == passages[i]
    assert store.get_many([52, 0]) == [passages[52], passages[0]]
    assert store.get(3).title == "T3" and store.get(3).text == "text 3 ü"
    with pytest.raises(IndexError, match="out of range"):
        store.get(53)


def test_build_index_summary_and_manifest(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"d{i}", "contents": f'"T{i}"\nword{i} common'}) + "\n" for i in range(30))
    )
    out = tmp_path / "idx"
    assert build_main(["--corpus", str(corpus), "--backend", "bm25", "--out", str(out), "--quiet"]) == 0
    line = capsys.readouterr().out
    assert "30 passages" in line and "MB on disk" in line and line.strip().endswith(" s")
    manifest = read_manifest(out)
    assert manifest["num_passages"] == 30 and set(manifest["backends"]) == {"bm25"}
    assert manifest["backends"]["bm25"]["k1"] == 0.9


def _toy_corpus(path: Path, word: str = "common") -> Path:
    path.write_text(
        "".join(json.dumps({"id": f"d{i}", "contents": f'"T{i}"\nword{i} {word}'}) + "\n" for i in range(30))
    )
    return path


def test_a_corpus_copied_again_keeps_its_indexes(tmp_path: Path) -> None:
    corpus = _toy_corpus(tmp_path / "c.jsonl")
    out = tmp_path / "idx"
    assert build_main(["--corpus", str(corpus), "--backend", "bm25", "--out", str(out), "--quiet"]) == 0
    docstore_mtime = (out / "docs.arrow").stat().st_mtime_ns
    os.utime(corpus, ns=(1, 1))  # the same bytes with a new mtime, as a fresh copy of the data has
    assert ensure_docstore(corpus, out, quiet=True) == 30
    assert (out / "docs.arrow").stat().st_mtime_ns == docstore_mtime, "the docstore was rebuilt"
    manifest = read_manifest(out)
    assert set(manifest["backends"]) == {"bm25"} and manifest["corpus"]["mtime_ns"] == 1


def test_a_corpus_changed_at_the_same_size_invalidates_its_indexes(tmp_path: Path) -> None:
    corpus = _toy_corpus(tmp_path / "c.jsonl")
    out = tmp_path / "idx"
    assert build_main(["--corpus", str(corpus), "--backend", "bm25", "--out", str(out), "--quiet"]) == 0
    _toy_corpus(corpus, word="Common")  # same size, other bytes
    os.utime(corpus, ns=(2, 2))
    assert ensure_docstore(corpus, out, quiet=True) == 30
    assert read_manifest(out)["backends"] == {}, "an index of the old contents must not be served"
