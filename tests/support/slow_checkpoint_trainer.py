"""The trainer's command line, with checkpoint STEP stalled half-written (for the crash-during-save test).

    python tests/support/slow_checkpoint_trainer.py STEP SECONDS --preset ppo key=value ...

The actor's part of checkpoint STEP is written into the ``.partial`` directory, then the
save sleeps for SECONDS, so the test can SIGKILL the process with the checkpoint half done.
The fault lives here, in the test's own subclass, not in the production trainer.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from agentrl.config import load_config  # noqa: E402
from agentrl.trainer.ppo_trainer import PPOTrainer  # noqa: E402


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
    step, seconds, flag, preset, *overrides = argv
    assert flag == "--preset", "usage: STEP SECONDS --preset NAME key=value ..."
    trainer = SlowCheckpointTrainer(load_config(preset, overrides), int(step), float(seconds))
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
