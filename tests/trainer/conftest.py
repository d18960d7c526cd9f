"""A small search world for trainer tests: corpus, BM25 index, a real retriever server,
QA parquet files and a tiny random policy trained-tokenizer model. Built once per session."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from agentrl.data.qa import make_prompt, read_question_records, to_training_rows, write_rows
from agentrl.data.world import generate_world, write_world
from agentrl.models.tiny import make_tiny_model_dir
from retriever.build_index import main as build_index
from retriever.process import RetrieverProcess


@dataclass
class SearchWorld:
    root: Path
    model_dir: Path
    train_file: Path
    test_file: Path
    retrieve_url: str

    def overrides(self, run_dir: Path, steps: int = 3, **extra: object) -> list[str]:
        """A configuration small enough for a few steps on 2 CPU cores."""
        base = {
            "actor.model_path": self.model_dir,
            "data.train_files": f"[{self.train_file}]",
            "data.val_files": f"[{self.test_file}]",
            "data.train_batch_size": 4,
            "data.max_prompt_length": 256,
            "data.max_response_length": 96,
            "data.val_limit": 4,
            "actor.rollout.max_tokens_per_turn": 24,
            "actor.rollout.max_obs_length": 32,
            "actor.rollout.max_turns": 1,
            "actor.rollout.schedule": "lockstep",
            "actor.rollout.tools": "[{class_path: agentrl.tools.retrieval.SearchTool, options: {url: '"
            + self.retrieve_url
            + "', topk: 1}}]",
            "actor.update.mini_batch_size": 4,
            "actor.update.micro_batch_size": 2,
            "critic.update.mini_batch_size": 4,
            "critic.update.micro_batch_size": 2,
            "actor.optim.lr": 1e-4,
            "actor.optim.warmup_ratio": 0.0,
            "critic.optim.warmup_ratio": 0.0,
            "trainer.total_steps": steps,
            "trainer.save_freq": 0,
            "trainer.test_freq": 0,
            "trainer.logger": "[jsonl]",
            "trainer.run_dir": run_dir,
            "resources.num_cpus": 4,
        }
        base.update(extra)
        return [f"{key}={value}" for key, value in base.items()]


@pytest.fixture(scope="session")
def search_world(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("search_world")
    world = generate_world(seed=0, num_countries=6, num_people=12, num_companies=6, num_distractors=6)
    paths = write_world(world, root / "world")
    for split in ("train", "test"):
        write_rows(
            to_training_rows(read_question_records(paths[split]), split, "synthetic_world"),
            root / f"{split}.parquet",
        )
    texts = [p["contents"] for p in world.passages] + [
        make_prompt(q.question) for q in world.train_questions[:20]
    ]
    model_dir = make_tiny_model_dir(root / "model", texts=texts, size="nano", seed=0)
    assert (
        build_index(
            ["--corpus", str(paths["corpus"]), "--backend", "bm25", "--out", str(root / "index"), "--quiet"]
        )
        == 0
    )
    with RetrieverProcess(root / "index", log_path=root / "retriever.log") as server:
        yield SearchWorld(
            root, model_dir, root / "train.parquet", root / "test.parquet", server.url + "/retrieve"
        )
