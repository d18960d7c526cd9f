"""KL coefficient controllers for the in-reward KL penalty (token_level_rewards = scores − β·KL).

A controller holds β and is told, once per step, the observed KL and how many samples it
was measured on. Its state is a plain dict so checkpoints can carry it.
"""

from __future__ import annotations

from typing import Protocol


class KLController(Protocol):
    value: float

    def update(self, current_kl: float, n_steps: int) -> None: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class FixedKLController:
    """β stays where it was set."""

    def __init__(self, init_kl_coef: float) -> None:
        self.value = float(init_kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        return None

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])


class AdaptiveKLController:
    """Proportional control of β toward a target KL (Ziegler et al. 2019).

        e = clip(KL / KL_target − 1, −0.2, 0.2)
        β ← β · (1 + e · n / horizon)

    so β grows when the policy drifts faster than the target and shrinks when it is
    more conservative; the clip bounds how fast β can move per update.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int) -> None:
        if target_kl <= 0:
            raise ValueError(f"target_kl must be > 0, got {target_kl}")
        if horizon <= 0:
            raise ValueError(f"horizon must be > 0, got {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + proportional_error * n_steps / self.horizon

    def state_dict(self) -> dict:
        return {"value": self.value, "target": self.target, "horizon": self.horizon}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])
        self.target = float(state["target"])
        self.horizon = int(state["horizon"])


KL_CONTROLLERS = ("fixed", "adaptive")


def build_kl_controller(
    kind: str, init_kl_coef: float, target_kl: float = 0.1, horizon: int = 10000
) -> KLController:
    """``kind``: 'fixed' or 'adaptive' (config ``algorithm.kl_ctrl.type``)."""
    if kind == "fixed":
        return FixedKLController(init_kl_coef)
    if kind == "adaptive":
        return AdaptiveKLController(init_kl_coef, target_kl, horizon)
    raise ValueError(f"unknown KL controller '{kind}'; expected one of {list(KL_CONTROLLERS)}")
