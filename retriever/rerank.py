"""Optional cross-encoder reranking over any local sequence-classification model directory.

Each query is scored only against its own candidates: the (query, passage) pairs of a batch
are flattened for one efficient forward pass and split back by per-query counts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from retriever.base import Hit, SearchBackend


class CrossEncoderReranker:
    """Scores (query, passage) pairs with ``AutoModelForSequenceClassification``.

    With one output label the logit is the score; with several, the last label's logit
    (the "relevant" class of binary rerankers).
    """

    def __init__(
        self, model_path: str | Path, batch_size: int = 32, max_length: int = 256, device: str = "cpu"
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if not Path(model_path).is_dir():
            raise FileNotFoundError(f"rerank_model: {str(model_path)!r} is not a local model directory")
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        self.model = AutoModelForSequenceClassification.from_pretrained(str(model_path)).to(device).eval()
        self.batch_size = batch_size
        # never exceed the model's position table (small local models have short ones)
        self.max_length = min(max_length, getattr(self.model.config, "max_position_embeddings", max_length))
        self.device = device

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Relevance score of each (query, passage) pair, batched."""
        scores: list[float] = []
        for start in range(0, len(pairs), self.batch_size):
            chunk = pairs[start : start + self.batch_size]
            enc = self.tokenizer(
                [q for q, _ in chunk],
                [p for _, p in chunk],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(self.device)
            with self._torch.inference_mode():
                logits = self.model(**enc).logits
            scores.extend(logits[:, -1].float().cpu().tolist())
        return scores

    def rerank(self, queries: Sequence[str], candidates: Sequence[Sequence[Hit]], k: int) -> list[list[Hit]]:
        """Reorder each query's own candidates by cross-encoder score; keep the top ``k``."""
        if len(queries) != len(candidates):
            raise ValueError(
                f"candidates: expected {len(queries)} lists (one per query), got {len(candidates)}"
            )
        pairs = [(q, h.contents) for q, hits in zip(queries, candidates, strict=True) for h in hits]
        flat = self.score_pairs(pairs)
        out: list[list[Hit]] = []
        pos = 0
        for hits in candidates:
            scored = [
                Hit(h.doc_id, h.contents, s) for h, s in zip(hits, flat[pos : pos + len(hits)], strict=True)
            ]
            pos += len(hits)
            scored.sort(key=lambda h: -h.score)
            out.append(scored[:k])
        return out


class RerankedBackend:
    """A first-stage backend fetching ``depth`` candidates, then a cross-encoder picking the top ``k``."""

    def __init__(self, first_stage: SearchBackend, reranker: CrossEncoderReranker, depth: int = 20) -> None:
        self.first_stage = first_stage
        self.reranker = reranker
        self.depth = depth
        self.name = f"{first_stage.name}+rerank"

    def __len__(self) -> int:
        return len(self.first_stage)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        candidates = self.first_stage.search(queries, max(k, self.depth))
        return self.reranker.rerank(queries, candidates, k)
