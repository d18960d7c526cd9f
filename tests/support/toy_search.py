"""A real retriever server over a handful of passages, for tests that need search."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from retriever.process import RetrieverProcess


def write_corpus(path: Path, passages: Sequence[tuple[str, str]]) -> Path:
    """``(title, text)`` pairs as a wiki-18 style jsonl corpus (ids ``d0``, ``d1``, ...)."""
    path.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "contents": f'"{title}"\n{text}'}) + "\n"
            for i, (title, text) in enumerate(passages)
        )
    )
    return path


@contextmanager
def toy_retriever(root: Path, passages: Sequence[tuple[str, str]]) -> Iterator[RetrieverProcess]:
    """Build a BM25 index with the real CLI and serve it on a free loopback port."""
    corpus = write_corpus(root / "corpus.jsonl", passages)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "retriever.build_index",
            "--corpus",
            str(corpus),
            "--backend",
            "bm25",
            "--out",
            str(root / "index"),
            "--quiet",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    with RetrieverProcess(root / "index", log_path=root / "server.log") as server:
        yield server
