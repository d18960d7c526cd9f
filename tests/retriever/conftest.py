"""Session-scoped indexes and real server subprocesses for the retriever tests.

Indexes are built once per session under a tmp dir: BM25 over the full 34,624-passage
corpus (~4 s) and a dense + BM25 index over a ~650-passage subset corpus (NQ gold passages
of a seeded question sample + BM25 hard negatives + seeded random distractors), so dense
tests stay fast on 2 cores (~15 s to embed) while recall is still measured honestly.
"""

from __future__ import annotations

import json
import random
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from retriever.build_index import main as build_main
from retriever.evaluation import load_questions
from retriever.process import RetrieverProcess

REPO = Path(__file__).resolve().parents[2]
SUBSET_QUESTIONS = 120
SUBSET_DISTRACTORS = 200
HARD_NEGATIVES = 3
SEED = 1234


def server_process(index_dir: Path, log_path: Path, extra_args: tuple[str, ...] = ()) -> RetrieverProcess:
    """A real ``python -m retriever.server`` subprocess on a free port, logging its
    access log as JSON lines beside ``log_path``. One worker unless ``extra_args`` say otherwise:
    these tests read one process's batching stats and cache through ``/health``."""
    return RetrieverProcess(
        index_dir,
        log_path=log_path,
        extra_args=("--workers", "1", *extra_args),
        access_log=str(log_path.with_suffix(".access.jsonl")),
    )


@pytest.fixture(scope="session")
def corpus_path(shared_data: Path) -> Path:
    return shared_data / "corpus" / "wiki_mini.jsonl"


@pytest.fixture(scope="session")
def bm25_index(tmp_path_factory: pytest.TempPathFactory, corpus_path: Path) -> Path:
    out = tmp_path_factory.mktemp("bm25_full")
    assert build_main(["--corpus", str(corpus_path), "--backend", "bm25", "--out", str(out), "--quiet"]) == 0
    return out


@dataclass
class SubsetSetup:
    index_dir: Path
    corpus: Path
    questions: list[dict]  # NQ questions whose gold passage is in the subset


@pytest.fixture(scope="session")
def subset_index(
    tmp_path_factory: pytest.TempPathFactory, shared_data: Path, corpus_path: Path, bm25_index: Path
) -> SubsetSetup:
    """Dense + BM25 over a small but hard corpus: the gold passages of SUBSET_QUESTIONS seeded NQ
    questions, each question's top BM25 passages from the full corpus (hard negatives: lexically
    close, often answer-free), and SUBSET_DISTRACTORS seeded random passages."""
    from retriever.index import open_backend

    questions = load_questions(
        shared_data / "nq" / "test.jsonl", require="gold_passage_ids", sample=SUBSET_QUESTIONS, seed=SEED
    )
    keep = {pid for q in questions for pid in q["gold_passage_ids"]}
    bm25 = open_backend(bm25_index, "bm25")
    for hits in bm25.search([q["question"] for q in questions], HARD_NEGATIVES):
        keep.update(h.doc_id for h in hits)
    lines = corpus_path.read_text(encoding="utf-8").splitlines()
    ids = [json.loads(ln)["id"] for ln in lines]
    rng = random.Random(SEED)
    rest = [ln for ln, i in zip(lines, ids, strict=True) if i not in keep]
    chosen = [ln for ln, i in zip(lines, ids, strict=True) if i in keep] + rng.sample(
        rest, SUBSET_DISTRACTORS
    )
    rng.shuffle(chosen)
    root = tmp_path_factory.mktemp("subset")
    corpus = root / "corpus.jsonl"
    corpus.write_text("\n".join(chosen) + "\n", encoding="utf-8")
    out = root / "index"
    for backend in ("dense", "bm25"):
        assert build_main(["--corpus", str(corpus), "--backend", backend, "--out", str(out), "--quiet"]) == 0
    return SubsetSetup(out, corpus, questions)


@pytest.fixture(scope="module")
def bm25_server(bm25_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RetrieverProcess]:
    log = tmp_path_factory.mktemp("srv") / "server.log"
    server = server_process(
        bm25_index, log, ("--max-topk", "50", "--max-queries-per-request", "32", "--max-query-chars", "500")
    ).start()
    yield server
    server.stop()


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator:
    """Factory for extra server subprocesses in one test; all are stopped at teardown."""
    started: list[RetrieverProcess] = []

    def make(index_dir: Path, *extra_args: str, wait: bool = True) -> RetrieverProcess:
        server = server_process(index_dir, tmp_path / f"server{len(started)}.log", tuple(extra_args))
        started.append(server)
        return server.start(wait=wait)

    yield make
    for server in started:
        server.stop(signal.SIGKILL)
