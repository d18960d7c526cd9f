"""The one place tests start and stop the driver's local Ray cluster.

A test that needs Ray asks for a cluster of the resources it means (``local_ray(cpus, gpus)``):
the cluster already running is kept when it has exactly those (a Ray start costs seconds), and
replaced when it has not. The session ends with none running. A trainer started in a test joins
the running cluster (``cluster.join.join_cluster`` leaves an initialised Ray as it is), so the
cluster's size is the test's choice, not the config's.
"""

from __future__ import annotations

import ray

DEFAULT_CPUS = 4  # room for the tiny runs' actor, critic, reference and reward


def local_ray(num_cpus: int = DEFAULT_CPUS, num_gpus: int = 0) -> None:
    """A local Ray cluster with exactly ``num_cpus`` CPUs and ``num_gpus`` (logical) GPUs."""
    if ray.is_initialized():
        have = ray.cluster_resources()
        if have.get("CPU") == num_cpus and have.get("GPU", 0) == num_gpus:
            return
        ray.shutdown()
    ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False)


def no_ray() -> None:
    """No local Ray cluster left running (the next test that needs one starts it)."""
    if ray.is_initialized():
        ray.shutdown()
