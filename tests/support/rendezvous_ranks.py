"""Gloo ranks that meet through ``data_plane.join_group`` in spawned processes (light imports:
a spawned child imports this module only, not the workers' model stack)."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from agentrl.cluster.data_plane import IFNAME_VARIABLES, join_group
from tests.support.spawned_ranks import spawn_ranks


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
    return spawn_ranks(_rank_main, [(r, world_size, master_addr, port) for r in range(world_size)])
