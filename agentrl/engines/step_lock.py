"""The engine's lock: one forward or weight change at a time, and a waiting change goes in at the next step.

A decode loop (``continuous.py``) takes the engine's lock around every step and gives it back
between two steps. With a plain ``threading.Lock`` nothing makes it give way: CPython's lock is
not fair, the loop takes it again microseconds after releasing it, and a weight update called
from another thread can wait until the whole running batch has finished (on a loaded machine
that is what happened: the new weights went in after the sequence they were meant to interrupt).

``StepLock`` is that lock with a rule for who goes next:

- ``with lock:`` (weight updates, sleep, wake-up, a coalesced batch) waits only for the holder;
- ``with lock.step():`` (one step of a loop) also waits while anyone is waiting on ``with lock:``.

So a change requested while the loop runs goes in at the loop's next step boundary, and the loop
resumes after it. Neither side is re-entrant.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class StepLock:
    """A mutex whose loop holders (``step()``) give way to plain holders waiting for it."""

    def __init__(self) -> None:
        self._state = threading.Condition()
        self._held = False
        self._waiting = 0  # callers blocked in ``with lock:``

    @property
    def waiting(self) -> int:
        """How many callers are blocked on ``with lock:`` now (a loop's next step waits for them)."""
        with self._state:
            return self._waiting

    def locked(self) -> bool:
        """Whether someone holds the lock now."""
        with self._state:
            return self._held

    def __enter__(self) -> StepLock:
        with self._state:
            self._waiting += 1
            try:
                self._state.wait_for(lambda: not self._held)
            finally:
                self._waiting -= 1
            self._held = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._release()

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Hold the lock for one step of a loop, after every caller already waiting on it."""
        with self._state:
            self._state.wait_for(lambda: not self._held and self._waiting == 0)
            self._held = True
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        with self._state:
            if not self._held:
                raise RuntimeError("StepLock released while not held")
            self._held = False
            self._state.notify_all()
