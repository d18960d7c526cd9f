"""Fixtures shared across the suite.

Real QA data and the wiki-18-style corpus live outside the repository (``../shared/data``
beside the checkout, or ``$AGENTRL_SHARED_DATA``). Tests that need them skip, saying
why, on a machine that does not have them; CI has them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.toy_search import toy_retriever

from agentrl.ports import free_port

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# vLLM compiles its CPU sampler with torch.compile at its first generation (~18 s a process here,
# ~45 s under the suite's load, measured); no test depends on those graphs, and agentrl compiles
# nothing itself. Inherited by the processes the tests start.
os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path | None:
    candidates = [os.environ.get("AGENTRL_SHARED_DATA"), REPO_ROOT.parent / "shared" / "data"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "corpus" / "wiki_mini.jsonl").is_file():
            return Path(candidate)
    return None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if path is None:
        pytest.skip("real QA data not found (set AGENTRL_SHARED_DATA or place it at ../shared/data)")
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-init nano model with a locally trained tokenizer (a real HF directory)."""
    from agentrl.models.tiny import make_tiny_model_dir

    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir: Path):
    from agentrl.models.loading import load_tokenizer

    return load_tokenizer(tiny_model_dir)


# A real retriever server for the rollout and tool tests (the evaluation's tests have their own).
PASSAGES = [
    ("Paris", "Paris is the capital and largest city of France. It lies on the Seine."),
    ("Jane Austen", "Jane Austen was an English novelist known for Pride and Prejudice."),
    ("Apollo 11", "Apollo 11 was the first mission to land humans on the Moon in 1969."),
    ("Jupiter", "Jupiter is the largest planet in the solar system."),
    ("Berlin", "Berlin is the capital of Germany. " + "The city has many museums and parks. " * 30),
]


@pytest.fixture(scope="session")
def retriever_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``retriever.server`` over a BM25 index of ``PASSAGES``, on loopback."""
    with toy_retriever(tmp_path_factory.mktemp("retriever"), PASSAGES) as server:
        yield server.retrieve_url


@pytest.fixture
def dead_url() -> str:
    """A loopback port nobody listens on."""
    return f"http://127.0.0.1:{free_port()}/retrieve"


@pytest.fixture(scope="module", autouse=True)
def no_ray_after_the_module() -> Iterator[None]:
    """Each test module leaves no local Ray cluster behind (``support.local_ray``)."""
    yield
    if "ray" in sys.modules:
        from support.local_ray import no_ray

        no_ray()


@pytest.fixture(scope="module")
def ray_cluster() -> None:
    """A local Ray cluster of 4 CPUs for the module's tests (``support.local_ray``)."""
    from support.local_ray import local_ray

    local_ray()
