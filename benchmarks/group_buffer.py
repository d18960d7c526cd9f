"""A step's wait for its rollout under a long-tailed tool: groups taken as they finish against a step's own.

    python -m benchmarks.group_buffer [--out runs/bench_groups] [--seed 0] [--latency-s 1.0]
        [--sigma 1.0] [--steps 10] [--max-staleness 2] [--modes by_step first_done first_done_2k]
        [--schedule concurrent]

The quickstart's world, index, tiny model and SFT warm start once (``common/quickstart_phases.py``),
then ``--steps`` steps of its PPO phase from that SFT model, without validation, once per mode: every search
first waits a seeded lognormal delay (median ``--latency-s``, log-spread ``--sigma``: at 1.0 one
search in ten waits over 3.6× the median), the same delay for the same query in every run, on one
rollout worker drawing ``--max-staleness`` steps ahead (``trainer.partial_rollout=continue``, one
torch thread per role: the rollout worker on one core, the actor, critic and reference on the other).
The trajectories run under ``--schedule`` (concurrent by default, the trainer's own: each
trajectory goes on as its own search returns; under the quickstart's lockstep a draw's trajectories
take each turn together and wait for its slowest search, which groups as calls of their own undo):

* ``by_step`` (the baseline): each step trains on the groups drawn for it, so it waits for the
  slowest of them;
* ``first_done`` (``trainer.take_groups=first_done``): each prompt's group a call of its own, a
  step training on the first done within the bound (``trainer/group_buffer.py``); with as many
  steps' worth generating as the bound allows, the bound forces each step's oldest draw whole;
* ``first_done_2k``: as many steps' worth generating (``trainer.groups_ahead`` k), but a bound of
  2k: the groups are as old when trained, and a slow one has 2k steps before the bound forces it.

Figures per run, medians over the steps after the first: the driver's wait for the step's rollout
(``timing_s/gen_wait``), the step's seconds, the phase's wall time, and the ratio of each against
``by_step``; the staleness of the trained tokens (mean), the groups the bound made a step wait for,
and the draws a batch mixes. The same ``--steps`` steps see different groups in the runs (a
slow group is trained later by groups), so the EM is not compared here: ``async_rollout`` compares
learning by wall time. Each run's figures are kept in ``<out>/<mode>.json``; a run already measured
is not run again.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.async_rollout import AHEAD, slow_tools
from benchmarks.common.quickstart_phases import build_shared, ppo_phase_config

FIRST_DONE = "trainer.take_groups=first_done"


def mode_overrides(mode: str, k: int) -> list[str]:
    """A mode's bound and buffer (module docstring)."""
    return {
        "by_step": [f"trainer.max_staleness={k}"],
        "first_done": [f"trainer.max_staleness={k}", FIRST_DONE],
        "first_done_2k": [f"trainer.max_staleness={2 * k}", FIRST_DONE, f"trainer.groups_ahead={k}"],
    }[mode]


MODES = ("by_step", "first_done", "first_done_2k")


def measure(mode: str, args: argparse.Namespace, shared: dict, out: Path) -> dict:
    from agentrl.quickstart.phases import train_ppo

    extra = mode_overrides(mode, args.max_staleness) + AHEAD
    extra += [
        slow_tools(shared["url"], args.latency_s, args.seed, args.sigma),
        f"actor.rollout.schedule={args.schedule}",
        f"trainer.total_steps={args.steps}",
        "trainer.test_freq=0",
        "trainer.val_before_train=false",
    ]
    run_dir = out / f"ppo_{mode}"
    config = ppo_phase_config(shared, out, run_dir, extra, args.seed)
    start = time.perf_counter()
    train_ppo(config, shared["sft_dir"])
    phase_s = time.perf_counter() - start
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "timing_s/step" in r][1:]
    median = statistics.median
    return {
        "mode": mode,
        "phase_s": phase_s,
        "wait_s_median": median(r["timing_s/gen_wait"] for r in steps),
        "wait_s_total": sum(r["timing_s/gen_wait"] for r in steps),
        "step_s_median": median(r["timing_s/step"] for r in steps),
        "staleness_mean": statistics.mean(r["off_policy/staleness_mean"] for r in steps),
        "bound_waits": sum(r.get("rollout_buffer/bound_waits", 0.0) for r in steps),
        "draws_in_batch_mean": statistics.mean(r.get("rollout_buffer/draws_in_batch", 1.0) for r in steps),
    }


def report(results: dict[str, dict], args: argparse.Namespace) -> None:
    """One row per mode; the ratios are against ``by_step``."""
    base = results["by_step"]
    print(
        f"\nsearch latency lognormal, median {args.latency_s:g} s, sigma {args.sigma:g}; "
        f"k {args.max_staleness}; {args.schedule}; {args.steps} steps, medians over steps 2-{args.steps}"
    )
    header = f"{'mode':<14} {'wait s':>7} {'ratio':>6} {'s/step':>7} {'ratio':>6} {'phase s':>8} {'ratio':>6}"
    print(f"{header} {'wait total':>10} {'staleness':>9} {'bound waits':>11} {'draws/batch':>11}")
    for mode, r in results.items():
        ratios = [
            r[k] / base[k] if base[k] else float("nan") for k in ("wait_s_median", "step_s_median", "phase_s")
        ]
        print(
            f"{mode:<14} {r['wait_s_median']:>7.2f} {ratios[0]:>6.2f} {r['step_s_median']:>7.2f} "
            f"{ratios[1]:>6.2f} {r['phase_s']:>8.0f} {ratios[2]:>6.2f} {r['wait_s_total']:>10.1f} "
            f"{r['staleness_mean']:>9.2f} {r['bound_waits']:>11.0f} {r['draws_in_batch_mean']:>11.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/bench_groups")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency-s", type=float, default=1.0)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--max-staleness", type=int, default=2)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--schedule", default="concurrent", choices=["concurrent", "lockstep"])
    parser.add_argument("--short", action="store_true", help="the quickstart's short profile (a smoke run)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = {m: out / f"{m}.json" for m in args.modes}
    todo = [m for m in args.modes if not path[m].exists()]
    if todo:
        shared, server = build_shared(out, args.short, args.seed)
        try:
            for mode in todo:
                path[mode].write_text(json.dumps(measure(mode, args, shared, out), indent=2))
        finally:
            server.stop()
    report({m: json.loads(path[m].read_text()) for m in args.modes}, args)


if __name__ == "__main__":
    main()
