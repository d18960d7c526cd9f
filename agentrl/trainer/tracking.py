"""Metric sinks: a readable console line per step, ``metrics.jsonl``, tensorboard, wandb."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Protocol, get_args

from tqdm import tqdm

from agentrl.config.schema import LoggerName

CONSOLE_KEYS = (
    ("reward/score/mean", "score"),
    ("val/all/em", "val_em"),
    ("actor/pg_loss", "pg"),
    ("actor/entropy", "ent"),
    ("actor/ppo_kl", "ppo_kl"),
    ("kl/mean", "kl"),
    ("critic/vf_loss", "vf"),
    ("rollout/num_turns", "turns"),
    ("rollout/tool_calls", "tools"),
    ("rollout/finished", "finish"),
    ("rollout/response_length", "len"),
    ("timing_s/step", "s"),
)


class Logger(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class ConsoleLogger:
    """One line per step with the metrics a person watches; the full set goes to the files."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        parts = [f"step {step}"]
        for key, label in CONSOLE_KEYS:
            if key in metrics:
                parts.append(f"{label}={metrics[key]:.4g}")
        tqdm.write(" | ".join(parts))

    def close(self) -> None:
        return None


class JsonlLogger:
    def __init__(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.handle = (run_dir / "metrics.jsonl").open("a")

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.handle.write(json.dumps({"step": step, **metrics}, allow_nan=True) + "\n")
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


class TensorboardLogger:
    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    def __init__(self, project: str, name: str, config: dict[str, Any]) -> None:
        try:
            import wandb
        except ImportError as error:
            raise ImportError(
                "trainer.logger includes 'wandb' but wandb is not installed: pip install wandb"
            ) from error
        self.run = wandb.init(project=project, name=name, config=config)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


LOGGERS: tuple[str, ...] = get_args(LoggerName)


class Tracker:
    """Fans one metrics dict out to every configured logger."""

    def __init__(
        self,
        kinds: list[str],
        run_dir: str | Path,
        project: str = "agentrl",
        name: str = "run",
        config: dict | None = None,
    ):
        run_dir = Path(run_dir)
        factories = {
            "console": ConsoleLogger,
            "jsonl": lambda: JsonlLogger(run_dir),
            "tensorboard": lambda: TensorboardLogger(run_dir),
            "wandb": lambda: WandbLogger(project, name, config or {}),
        }
        unknown = [k for k in kinds if k not in LOGGERS]
        if unknown:
            raise ValueError(f"trainer.logger: unknown logger(s) {unknown}; expected some of {list(LOGGERS)}")
        self.loggers: list[Logger] = [factories[k]() for k in kinds]

    def log(self, metrics: dict[str, float], step: int) -> None:
        for logger in self.loggers:
            logger.log(metrics, step)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()


def first_non_finite(metrics: dict[str, float]) -> str | None:
    """The first metric that is NaN or inf, if any."""
    for key, value in metrics.items():
        if isinstance(value, float) and not math.isfinite(value):
            return key
    return None
