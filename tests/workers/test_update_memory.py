"""An update's metrics report the memory of the worker's process (no Ray): a growing ``rss``
over steps is the early sign of a run heading for the node's out-of-memory killer."""

from __future__ import annotations

import sys

import pytest
import torch

from agentrl.workers.actor import ActorWorker
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
