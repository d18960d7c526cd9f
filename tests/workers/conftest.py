"""Fixtures shared by the worker tests."""

from __future__ import annotations

import pytest
import ray


@pytest.fixture(scope="module")
def local_ray():
    """A fresh local Ray cluster of 4 CPUs for one test module (any earlier one is shut down)."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=4, include_dashboard=False)
    yield
    ray.shutdown()
