"""Gloo ranks that meet through ``data_plane.join_group`` in spawned processes (light imports:
a spawned child imports this module only, not the workers' model stack)."""

from __future__ import annotations

import multiprocessing as mp
import os
from typing import Any

import torch
import torch.distributed as dist

from agentrl.workers.data_plane import IFNAME_VARIABLES, join_group


def _rank_main(rank: int, world_size: int, master_addr: str, port: int, queue: Any) -> None:
    for name in IFNAME_VARIABLES:  # a spawned child inherits the test process's environment
        os.environ.pop(name, None)
    join_group(
        "gloo", rank, world_size, master_addr, port, master_addr, timeout_s=30.0, configured_ifname=None
    )
    try:
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value)
        backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        timeout = backend.options._timeout.total_seconds()
        queue.put(
            (
                rank,
                {"sum": value.item(), "ifname": os.environ.get("GLOO_SOCKET_IFNAME"), "timeout_s": timeout},
            )
        )
    finally:
        dist.destroy_process_group()


def meet(world_size: int, master_addr: str, port: int) -> list[dict[str, Any]]:
    """Each rank's all_reduce of ``rank + 1``, its GLOO_SOCKET_IFNAME and its group's timeout, by rank."""
    spawn = mp.get_context("spawn")
    queue = spawn.Queue()
    ranks = [
        spawn.Process(target=_rank_main, args=(r, world_size, master_addr, port, queue))
        for r in range(world_size)
    ]
    for process in ranks:
        process.start()
    results = dict(queue.get(timeout=120) for _ in ranks)
    for process in ranks:
        process.join(timeout=60)
        assert process.exitcode == 0, f"rank process exited with {process.exitcode}"
    return [results[rank] for rank in range(world_size)]
