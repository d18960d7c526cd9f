"""Fixtures for the evaluation harness tests: a tiny real model, a handful of questions,
and a real BM25 retriever server subprocess over a few passages on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.eval_toy import PASSAGES, QUESTIONS
from support.toy_search import toy_retriever


@pytest.fixture(scope="session")
def questions_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("qa") / "toy.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"id": i, "question": q, "golden_answers": g, "dataset": "toy", "in_corpus": i != "q6"}
            )
            + "\n"
            for i, q, g in QUESTIONS
        )
    )
    return path


@pytest.fixture(scope="session")
def retriever_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with toy_retriever(tmp_path_factory.mktemp("retriever"), PASSAGES) as server:
        yield server.retrieve_url
