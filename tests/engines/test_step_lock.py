"""The engine's lock: a caller waiting on it goes in at the loop's next step, not after the loop."""

from __future__ import annotations

import threading
import time

import pytest

from agentrl.engines.step_lock import StepLock

STEPS = 200  # a loop far longer than the few steps a waiting caller may be held


def run_loop(lock: StepLock, steps: list[int], stop: threading.Event) -> None:
    """A decode loop: hold the lock for a step's work, give it back, take it again at once."""
    for i in range(STEPS):
        if stop.is_set():
            return
        with lock.step():
            time.sleep(0.002)  # the forward, done under the lock
            steps.append(i)


def test_a_caller_waiting_on_the_lock_goes_in_at_the_loops_next_step():
    lock, steps, stop = StepLock(), [], threading.Event()
    loop = threading.Thread(target=run_loop, args=(lock, steps, stop))
    loop.start()
    while len(steps) < 5:
        time.sleep(0.001)
    asked_at = len(steps)
    with lock:  # what update_weights does
        got_in_at = len(steps)
        time.sleep(0.01)  # the loop makes no step while the caller holds the lock
        assert len(steps) == got_in_at
    stop.set()
    loop.join(10)
    assert got_in_at - asked_at <= 1  # at most the step that was running when it asked
    assert got_in_at < STEPS  # and long before the loop would have ended by itself


def test_the_loop_resumes_once_the_caller_has_gone():
    lock, steps, stop = StepLock(), [], threading.Event()
    with lock:
        loop = threading.Thread(target=run_loop, args=(lock, steps, stop))
        loop.start()
        time.sleep(0.02)
        assert steps == [] and lock.locked()
    deadline = time.monotonic() + 10
    while len(steps) < 3 and time.monotonic() < deadline:
        time.sleep(0.001)
    stop.set()
    loop.join(10)
    assert len(steps) >= 3


def test_a_release_that_was_never_taken_is_refused():
    with pytest.raises(RuntimeError, match="released while not held"):
        StepLock().__exit__(None, None, None)
