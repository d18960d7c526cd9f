"""Train a search agent: ``python -m agentrl.trainer.main [--preset ppo|grpo|FILE.yaml ...] key=value ...``

The config is loaded and checked in full (unknown keys, wrong types, missing files) before
Ray starts or a model loads, and so are its tools (``tools.check``: class path, options,
tags) and the cluster's address (``cluster.join.check_address``: a head nothing answers at is
named in seconds); a bad key costs a second, not a cluster start-up.

An error that stops the run is one ``error:`` line on stderr (``config.errors``), its traceback
only with ``AGENTRL_DEBUG=1``. Exit codes: 0 done, 2 a start-up error (config, tools, joining the
cluster, room for the roles), 3 training diverged, 4 a role failed and no restart was left.
"""

from __future__ import annotations

import argparse
import sys

from agentrl.cluster.join import check_address
from agentrl.config.errors import DEBUG_ENV, StartupError, report_error
from agentrl.config.loader import ConfigError, available_presets, load_config, to_yaml
from agentrl.tools.check import ToolConfigError, check_tools

EPILOG = (
    "exit codes: 0 done, 2 a start-up error (config, tools, joining the cluster, room for the roles), "
    "3 training diverged, 4 a role failed and no restart was left. An error is one 'error:' line; "
    f"{DEBUG_ENV}=1 prints its traceback too."
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m agentrl.trainer.main",
        description="PPO/GRPO training of a search agent. Overrides are dotted keys: actor.optim.lr=1e-6",
        epilog=EPILOG,
    )
    parser.add_argument(
        "--preset",
        action="append",
        help=f"config preset ({', '.join(available_presets())}) or a YAML file; repeat to merge in order "
        "(e.g. --preset grpo --preset scale_gpu); default: ppo",
    )
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("overrides", nargs="*", help="key=value overrides")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = load_config(args.preset or ["ppo"], args.overrides)
        if args.print_config:
            print(to_yaml(config))
            return 0
        check_tools(config.actor.rollout.tools, config.actor.rollout.tool_format)
        check_address(config.resources.ray_address)  # seconds, before the model and data load
    except (ConfigError, ToolConfigError, StartupError) as error:
        return report_error(error, 2)

    from agentrl.trainer.ppo_trainer import TrainingDiverged
    from agentrl.trainer.supervisor import RunStopped, Supervisor

    supervisor = Supervisor(config)  # restarts after a lost node when trainer.max_restarts > 0
    try:
        supervisor.fit()
    except StartupError as error:  # the token refused, no room for the roles
        return report_error(error, 2)
    except TrainingDiverged as error:
        return report_error(error, 3, "training diverged: ")
    except RunStopped as error:
        return report_error(error, 4)
    finally:
        supervisor.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
