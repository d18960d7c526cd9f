"""The trainer's command line, with checkpoint STEP stalled half-written (for the crash-during-save test).

    python tests/support/slow_checkpoint_trainer.py STEP SECONDS [--in-process] --preset ppo key=value ...

The actor's part of checkpoint STEP is written into the ``.partial`` directory, then the
save sleeps for SECONDS, so the test can SIGKILL the process with the checkpoint half done.
The fault lives here, in the test's own subclass, not in the production trainer. With
``--in-process`` the roles run in this process (``support.in_process``), without Ray.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

from agentrl.config import load_config  # noqa: E402
from agentrl.trainer.ppo_trainer import PPOTrainer  # noqa: E402
from support.in_process import start_in_process  # noqa: E402


class SlowCheckpointTrainer(PPOTrainer):
    def __init__(self, config, stall_step: int, seconds: float) -> None:
        super().__init__(config)
        self.stall_step, self.seconds = stall_step, seconds

    def save_checkpoint(self, score: float | None = None) -> Path:
        if self.global_step == self.stall_step:
            self.roles.actor.run_all("save_checkpoint", str(self.checkpoints.partial_dir(self.global_step)))
            time.sleep(self.seconds)
        return super().save_checkpoint(score)


def main(argv: list[str]) -> int:
    step, seconds, *rest = argv
    in_process = rest[:1] == ["--in-process"]
    flag, preset, *overrides = rest[1:] if in_process else rest
    assert flag == "--preset", "usage: STEP SECONDS [--in-process] --preset NAME key=value ..."
    trainer = SlowCheckpointTrainer(load_config(preset, overrides), int(step), float(seconds))
    if in_process:
        trainer.init_workers = lambda: start_in_process(trainer)
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
