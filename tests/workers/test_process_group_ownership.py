"""A worker destroys only the process group it created.

vLLM running in-process creates the default torch.distributed group for itself; a worker that
tore it down on shutdown broke the engine (seen in CI as vLLM's own shutdown failing with
"Invalid process group specified").
"""

from __future__ import annotations

import pytest
import torch.distributed as dist

from agentrl.ports import free_port
from agentrl.workers.base import RunContext, Worker


def context(strategy: str) -> RunContext:
    return RunContext(
        seed=0, device="cpu", total_steps=1, max_prompt_length=8, max_response_length=8, strategy=strategy
    )


@pytest.fixture
def foreign_group():
    """A default process group created outside any worker, as an in-process engine does."""
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield dist.group.WORLD
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.parametrize("strategy", ["dp", "fsdp"])
def test_shutting_a_worker_down_leaves_a_group_it_did_not_create(foreign_group, strategy):
    worker = Worker(context(strategy))
    worker.shutdown()
    assert dist.is_initialized(), "the worker destroyed a process group it did not create"
    assert dist.group.WORLD is foreign_group


def test_a_worker_refuses_a_foreign_group_of_another_world_size(foreign_group):
    with pytest.raises(RuntimeError, match="world size 1 .*needs rank 1 of 2"):
        Worker(context("fsdp"), rank=1, world_size=2, master_port=free_port())
    assert dist.is_initialized()


def test_a_worker_destroys_the_group_it_created():
    worker = Worker(context("fsdp"))
    assert dist.is_initialized()
    worker.shutdown()
    assert not dist.is_initialized()
