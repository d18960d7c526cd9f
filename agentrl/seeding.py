"""Random seeds: seeding a process, saving its RNG state, and deriving independent seeds.

``derive_seed(base, *parts)`` hashes the tuple, so seeds derived for different
(step, rank, row, turn) tuples are independent streams that never collide; arithmetic
offsets such as ``base + step + row`` do collide (row i of one call is row i + 1 of the
previous one).
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import torch

SEED_BITS = 63  # torch.Generator.manual_seed takes any int < 2**64; stay positive everywhere


def derive_seed(base: int, *parts: int | str) -> int:
    """A 63-bit seed determined by ``(base, *parts)`` alone: ``blake2b`` of their text."""
    text = "/".join(str(x) for x in (base, *parts)).encode()
    digest = hashlib.blake2b(text, digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - SEED_BITS)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
