"""An update's metrics report the memory of the worker's process (no Ray): a growing ``rss``
over steps is the early sign of a run heading for the node's out-of-memory killer."""

from __future__ import annotations

import sys

import pytest
import torch

from agentrl.workers.actor import ActorWorker
from agentrl.workers.base import process_memory_gib, release_free_heap
from tests.support.actor_ranks import actor_section, context, ppo_batch


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="current RSS is read from /proc")
def test_the_update_metrics_follow_the_memory_the_process_holds(tiny_model_dir):
    worker = ActorWorker(actor_section(str(tiny_model_dir)), context("dp"))
    batch = ppo_batch(worker.model.config.vocab_size)
    before = worker.update_actor(batch)
    ballast = torch.ones(2**27)  # 512 MiB the process now holds
    after = worker.update_actor(batch)
    assert after["actor/rss_gib"] - before["actor/rss_gib"] > 0.4
    assert after["actor/peak_rss_gib"] > 0.5
    del ballast


def freed_heap_gib() -> tuple[float, torch.Tensor]:
    """Fill the C heap with ~0.3 GiB of small tensors and free them behind a live one, which the
    caller keeps (so the heap cannot shrink from its top by itself): the resident GiB then, and it."""
    blocks = [torch.ones(4096) for _ in range(20000)]  # 16 KiB each: heap, not mmap
    pin = torch.ones(16)  # allocated last, above the freed blocks
    del blocks
    return process_memory_gib()["rss_gib"], pin


GLIBC = "glibc's malloc_trim; current RSS read from /proc"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason=GLIBC)
def test_releasing_the_free_heap_gives_the_memory_of_freed_tensors_back_to_the_os():
    freed, _pin = freed_heap_gib()
    assert release_free_heap()
    assert process_memory_gib()["rss_gib"] < freed - 0.2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason=GLIBC)
def test_an_update_hands_the_heap_it_freed_back_before_the_rollout(tiny_model_dir):
    # On CPU an update frees gigabytes of activations; held in the heap, they would stay resident
    # through the next rollout and fragment further every step.
    worker = ActorWorker(actor_section(str(tiny_model_dir)), context("dp"))
    batch = ppo_batch(worker.model.config.vocab_size)
    worker.update_actor(batch)
    freed, _pin = freed_heap_gib()
    after = worker.update_actor(batch)
    assert after["actor/rss_gib"] < freed - 0.2
