"""An update's metrics report the memory of the worker's process (no Ray): a growing ``rss``
over steps is the early sign of a run heading for the node's out-of-memory killer."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

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


# The two heap tests measure in a fresh interpreter: at the end of a 35-minute suite the pytest
# process carries threads and heaps of everything before it, and one CI run saw only half of the
# freed 0.3 GiB leave while the update below, a second later, measured its full drop.
FREED_HEAP = """
import torch
from agentrl.workers.os_memory import process_memory_gib


def freed_heap_gib():
    # ~0.3 GiB of 16 KiB tensors (heap, not mmap) freed behind one allocated last, which the
    # caller keeps, so the heap cannot shrink from its top by itself
    blocks = [torch.ones(4096) for _ in range(20000)]
    pin = torch.ones(16)
    del blocks
    return process_memory_gib()["rss_gib"], pin
"""


def measured_in_a_fresh_process(code: str, *args: str) -> dict[str, float]:
    """Run ``FREED_HEAP + code`` in a new interpreter at the repository root; the JSON it prints
    last."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", FREED_HEAP + textwrap.dedent(code), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


GLIBC = "glibc's malloc_trim; current RSS read from /proc"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason=GLIBC)
def test_releasing_the_free_heap_gives_the_memory_of_freed_tensors_back_to_the_os():
    measured = measured_in_a_fresh_process(
        """
        import json
        from agentrl.workers.os_memory import release_free_heap

        freed, pin = freed_heap_gib()
        released = release_free_heap()
        print(json.dumps({"freed": freed, "released": released,
                          "after": process_memory_gib()["rss_gib"]}))
        """
    )
    assert measured["released"]
    assert measured["after"] < measured["freed"] - 0.2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason=GLIBC)
def test_an_update_hands_the_heap_it_freed_back_before_the_rollout(tiny_model_dir):
    # On CPU an update frees gigabytes of activations; held in the heap, they would stay resident
    # through the next rollout and fragment further every step.
    measured = measured_in_a_fresh_process(
        """
        import json, sys
        from agentrl.workers.actor import ActorWorker
        from tests.support.actor_ranks import actor_section, context, ppo_batch

        worker = ActorWorker(actor_section(sys.argv[1]), context("dp"))
        batch = ppo_batch(worker.model.config.vocab_size)
        worker.update_actor(batch)
        freed, pin = freed_heap_gib()
        after = worker.update_actor(batch)
        print(json.dumps({"freed": freed, "after": after["actor/rss_gib"]}))
        """,
        str(tiny_model_dir),
    )
    assert measured["after"] < measured["freed"] - 0.2
