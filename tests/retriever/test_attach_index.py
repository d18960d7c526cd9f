"""Bringing your own FAISS index and corpus jsonl: the checks, the offset-table store, memory-mapping."""

from __future__ import annotations

import json
from pathlib import Path

import faiss
import numpy as np
import pytest

from retriever.attach_index import main as attach_main
from retriever.build_index import main as build_main
from retriever.corpus import CorpusFormatError, iter_corpus
from retriever.faiss_io import read_faiss_index
from retriever.index import BackendOptions, open_backend, read_manifest
from retriever.jsonl_store import JsonlDocStore, build_offsets

N_PASSAGES = 40
QUESTIONS = ["who was the first president of the united states", "where is the eiffel tower", "nobel prize"]
# the pip-shipped MiniLM's own modules: mean pooling, 256 tokens, normalised, no prefixes
MINILM_AS_BUILT = [
    "--pooling",
    "mean",
    "--max-seq-length",
    "256",
    "--query-prefix",
    "",
    "--passage-prefix",
    "",
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> tuple[Path, Path]:
    """A corpus of real passages and a flat MiniLM index built from it the usual way."""
    root = tmp_path_factory.mktemp("byo")
    lines = (shared_data / "corpus" / "wiki_mini.jsonl").read_text(encoding="utf-8").splitlines()
    corpus = root / "corpus.jsonl"
    corpus.write_text("\n".join(lines[:N_PASSAGES]) + "\n", encoding="utf-8")
    out = root / "built"
    assert build_main(["--corpus", str(corpus), "--backend", "dense", "--out", str(out), "--quiet"]) == 0
    return corpus, out


def _attach(index: Path, corpus: Path, out: Path, *extra: str) -> int:
    argv = ["--faiss-index", str(index), "--corpus", str(corpus), "--out", str(out), "--quiet"]
    return attach_main([*argv, *extra])


def test_an_attached_index_answers_exactly_like_the_directory_it_was_built_in(built, tmp_path):
    corpus, built_dir = built
    out = tmp_path / "byo"
    assert _attach(built_dir / "dense" / "index.faiss", corpus, out, *MINILM_AS_BUILT) == 0
    manifest = read_manifest(out)
    assert manifest["docstore"]["kind"] == "jsonl"
    assert manifest["backends"]["dense"]["vector_check_min_cosine"] > 0.999
    assert not (out / "docs.arrow").exists()  # nothing copied
    mine, theirs = open_backend(out, "dense"), open_backend(built_dir, "dense")
    for a, b in zip(mine.search(QUESTIONS, 5), theirs.search(QUESTIONS, 5), strict=True):
        assert [(h.doc_id, h.contents) for h in a] == [(h.doc_id, h.contents) for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)


def test_attach_refuses_an_index_of_another_dimension_and_writes_nothing(built, tmp_path, capsys):
    corpus, _ = built
    index = faiss.IndexFlatIP(8)
    index.add(np.random.default_rng(0).standard_normal((N_PASSAGES, 8)).astype(np.float32))
    faiss.write_index(index, str(tmp_path / "d8.faiss"))
    assert _attach(tmp_path / "d8.faiss", corpus, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "--model" in err and "384" in err and "holds 8" in err
    assert not (tmp_path / "out").exists()


def test_attach_refuses_a_corpus_whose_line_count_is_not_the_vector_count(built, tmp_path, capsys):
    corpus, built_dir = built
    short = tmp_path / "short.jsonl"
    short.write_text("".join(corpus.read_text(encoding="utf-8").splitlines(True)[:-1]), encoding="utf-8")
    assert _attach(built_dir / "dense" / "index.faiss", short, tmp_path / "out", *MINILM_AS_BUILT) == 2
    err = capsys.readouterr().err
    assert "--corpus" in err and f"{N_PASSAGES - 1} lines" in err and f"{N_PASSAGES} vectors" in err


def test_attach_refuses_encoder_settings_the_index_was_not_built_with(built, tmp_path, capsys):
    corpus, built_dir = built
    # e5's defaults (a "passage: " prefix) on an index built without a prefix
    wrong = ["--pooling", "mean", "--max-seq-length", "256"]
    assert _attach(built_dir / "dense" / "index.faiss", corpus, tmp_path / "out", *wrong) == 2
    err = capsys.readouterr().err
    assert "--passage-prefix" in err and "cosine" in err
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_the_jsonl_store_gives_back_every_line_as_the_corpus_reader_does(tmp_path):
    rows = [{"id": f"d{i}", "contents": f'"Títle {i}"\nline {i} – ünïcode'} for i in range(7)]
    corpus = tmp_path / "c.jsonl"
    # the last line has no newline: it still ends where the file ends
    corpus.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    assert build_offsets(corpus, tmp_path / "o.npy") == 7
    store = JsonlDocStore(corpus, tmp_path / "o.npy")
    assert len(store) == 7
    assert [store.get(i) for i in range(7)] == list(iter_corpus(corpus))
    with pytest.raises(IndexError, match="row 7 out of range"):
        store.get(7)


def test_a_malformed_line_stops_the_offset_table_with_its_line_number(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "contents": "x"}\n{"id": "b", "contents": "y"}\n{"id": "c"}\n')
    with pytest.raises(CorpusFormatError, match=r"c\.jsonl:3: missing field 'contents'"):
        build_offsets(corpus, tmp_path / "o.npy")
    assert not (tmp_path / "o.npy").exists()


def test_a_corpus_changed_since_its_offset_table_was_built_is_refused(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "contents": "x"}\n')
    build_offsets(corpus, tmp_path / "o.npy")
    with corpus.open("a") as fh:
        fh.write('{"id": "b", "contents": "y"}\n')
    with pytest.raises(ValueError, match="docstore.corpus: .* changed since"):
        JsonlDocStore(corpus, tmp_path / "o.npy")


def _rss_anon_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.parametrize("factory", ["Flat", "IVF8,Flat", "HNSW8,SQ8"])
def test_a_memory_mapped_index_answers_as_the_loaded_one_and_opens_without_copying(tmp_path, factory):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20_000, 384)).astype(np.float32)  # 30 MB of vectors
    index = faiss.index_factory(384, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(x[:4000])
    index.add(x)
    faiss.write_index(index, str(tmp_path / "i.faiss"))
    del index
    before = _rss_anon_kb()
    mapped = read_faiss_index(tmp_path / "i.faiss", "mmap")
    opened_kb = _rss_anon_kb() - before
    loaded = read_faiss_index(tmp_path / "i.faiss", "ram")
    q = rng.standard_normal((16, 384)).astype(np.float32)
    assert (mapped.search(q, 5)[1] == loaded.search(q, 5)[1]).all()
    if factory == "Flat":  # the vectors stay in the file: opening allocates next to nothing
        assert opened_kb < 8_000, f"opening the mapped flat index took {opened_kb} kB of anonymous memory"
    with pytest.raises(ValueError, match="index_load: expected one of"):
        read_faiss_index(tmp_path / "i.faiss", "lazy")


def test_an_unknown_dense_index_name_is_refused_with_the_names_there_are(built):
    _, built_dir = built
    with pytest.raises(ValueError, match=r"dense_index: no index named 'ivf' .*\['base'\]"):
        open_backend(built_dir, "dense", BackendOptions(dense_index="ivf"))


def test_a_corpus_whose_last_line_has_no_newline_attaches(built, tmp_path):
    corpus, built_dir = built
    bare = tmp_path / "bare.jsonl"
    bare.write_text(corpus.read_text(encoding="utf-8").rstrip("\n"), encoding="utf-8")
    assert _attach(built_dir / "dense" / "index.faiss", bare, tmp_path / "out", *MINILM_AS_BUILT) == 0
    assert read_manifest(tmp_path / "out")["num_passages"] == N_PASSAGES


def test_an_id_mapped_index_and_a_file_that_is_no_index_are_refused_by_option(built, tmp_path, capsys):
    corpus, built_dir = built
    flat = faiss.read_index(str(built_dir / "dense" / "index.faiss"))
    mapped = faiss.IndexIDMap(faiss.IndexFlatIP(flat.d))
    mapped.add_with_ids(flat.reconstruct_n(0, flat.ntotal), np.arange(flat.ntotal) + 1000)
    faiss.write_index(mapped, str(tmp_path / "idmap.faiss"))
    assert _attach(tmp_path / "idmap.faiss", corpus, tmp_path / "out", *MINILM_AS_BUILT) == 2
    assert "--faiss-index" in capsys.readouterr().err
    (tmp_path / "junk.faiss").write_bytes(b"not an index at all")
    assert _attach(tmp_path / "junk.faiss", corpus, tmp_path / "out", *MINILM_AS_BUILT) == 2
    assert "--faiss-index" in capsys.readouterr().err


def test_attaching_again_with_an_arrow_docstore_writes_it_for_the_page_reader(built, tmp_path):
    corpus, built_dir = built
    index = built_dir / "dense" / "index.faiss"
    assert _attach(index, corpus, tmp_path / "out", *MINILM_AS_BUILT) == 0
    assert read_manifest(tmp_path / "out")["docstore"]["kind"] == "jsonl"
    assert _attach(index, corpus, tmp_path / "out", *MINILM_AS_BUILT, "--docstore", "arrow") == 0
    assert read_manifest(tmp_path / "out")["docstore"]["kind"] == "arrow"
    assert (tmp_path / "out" / "docs.arrow").is_file()


def test_a_corpus_rewritten_at_the_same_size_is_refused(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "contents": "xy"}\n{"id": "b", "contents": "z"}\n')
    build_offsets(corpus, tmp_path / "o.npy")
    corpus.write_text('{"id": "a", "contents": "x"}\n{"id": "b", "contents": "zy"}\n')  # same bytes count
    with pytest.raises(ValueError, match="line 1 .* no longer ends where"):
        JsonlDocStore(corpus, tmp_path / "o.npy")


def test_attaching_over_the_same_corpus_keeps_its_bm25_index_and_serves_hybrid(built, tmp_path):
    corpus, built_dir = built
    out = tmp_path / "out"
    assert build_main(["--corpus", str(corpus), "--backend", "bm25", "--out", str(out), "--quiet"]) == 0
    assert _attach(built_dir / "dense" / "index.faiss", corpus, out, *MINILM_AS_BUILT) == 0
    assert set(read_manifest(out)["backends"]) == {"bm25", "dense"}
    hits = open_backend(out, "hybrid").search(QUESTIONS[:1], 3)[0]
    assert len(hits) == 3
