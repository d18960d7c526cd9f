"""The engine link: an engine's own weight copy kept current, its memory freed between rollouts."""

from __future__ import annotations

import torch

from agentrl.engines.factory import EngineChoice
from agentrl.engines.link import SLEEP_FREED_METRIC, WEIGHT_SYNC_METRIC, EngineLink


class RecordingEngine:
    """Records what the link asks of it; a sleep frees ``frees`` bytes."""

    def __init__(self, frees: int = 0) -> None:
        self.frees = frees
        self.calls: list[str] = []
        self.received: list[dict[str, torch.Tensor]] = []

    def update_weights(self, weights) -> None:
        self.calls.append("update_weights")
        self.received.append(dict(weights))

    def wake_up(self) -> None:
        self.calls.append("wake_up")

    def sleep(self, release_weights: bool = False) -> int:
        self.calls.append(f"sleep(release_weights={release_weights})")
        return self.frees

    def shutdown(self) -> None:
        self.calls.append("shutdown")


def link_of(kind: str, own_copy: bool, sleeps: bool = False, frees: int = 0):
    engine = RecordingEngine(frees)
    weights = {"w": torch.zeros(2)}
    link = EngineLink(EngineChoice(kind, own_copy, sleeps), build=lambda: engine, weights=lambda: weights)
    return link, engine, weights


def test_the_engine_is_built_on_first_use_only():
    built: list[RecordingEngine] = []

    def build() -> RecordingEngine:
        built.append(RecordingEngine())
        return built[-1]

    link = EngineLink(EngineChoice("vllm", own_copy=True, sleeps=False), build=build, weights=dict)
    link.shutdown()  # nothing built, nothing to shut down
    assert not link.built and built == []
    assert link.engine is link.engine
    assert len(built) == 1


def test_an_engine_sharing_the_training_module_is_never_synced():
    link, engine, _ = link_of("hf", own_copy=False)
    link.weights_changed()
    assert not link.stale
    assert link.wake() == {}
    assert engine.calls == ["wake_up"]


def test_an_engine_with_its_own_copy_is_synced_once_after_the_weights_change():
    link, engine, weights = link_of("vllm", own_copy=True)
    assert link.wake() == {}, "a vLLM copy starts from the directory's weights: nothing to send"
    link.weights_changed()
    assert link.stale
    weights["w"] += 1.0
    metrics = link.wake()
    assert list(metrics) == [WEIGHT_SYNC_METRIC] and metrics[WEIGHT_SYNC_METRIC] >= 0
    assert not link.stale
    assert link.sync() is None, "a second sync sends nothing"
    assert engine.calls == ["wake_up", "wake_up", "update_weights"]
    torch.testing.assert_close(engine.received[0]["w"], torch.ones(2))


def test_a_transformers_copy_is_synced_before_its_first_rollout():
    link, engine, _ = link_of("hf", own_copy=True)
    assert WEIGHT_SYNC_METRIC in link.wake()
    assert engine.calls == ["wake_up", "update_weights"]


def test_a_sleep_that_released_the_copy_makes_the_next_rollout_resend_it():
    link, engine, _ = link_of("vllm", own_copy=True, sleeps=True, frees=3 * 2**20)
    link.wake()
    assert link.rest() == {SLEEP_FREED_METRIC: 3.0}
    assert link.stale
    assert WEIGHT_SYNC_METRIC in link.wake()
    assert engine.calls == ["wake_up", "sleep(release_weights=True)", "wake_up", "update_weights"]


def test_a_sleep_that_freed_nothing_leaves_the_copy_current():
    link, engine, _ = link_of("vllm", own_copy=True, sleeps=True, frees=0)
    assert link.rest() == {SLEEP_FREED_METRIC: 0.0}
    assert not link.stale


def test_a_shared_engine_sleeps_without_releasing_the_training_weights():
    link, engine, _ = link_of("hf", own_copy=False, sleeps=True, frees=2**20)
    assert link.rest() == {SLEEP_FREED_METRIC: 1.0}
    assert engine.calls == ["sleep(release_weights=False)"]
    assert not link.stale


def test_an_engine_that_stays_awake_reports_no_sleep():
    link, engine, _ = link_of("vllm", own_copy=True, sleeps=False)
    assert link.rest() == {}
    assert engine.calls == []
