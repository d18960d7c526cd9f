"""Rollouts drawn ahead on a rollout worker against synchronous training, under a slow search tool.

    python -m benchmarks.async_rollout [--out runs/bench_async] [--seeds 0 1 2] [--latency-s 1.0 0.3]
        [--modes sync ahead2 ahead4 groups2 groups4] [--target-em 0.55] [--short] [--plot PNG]

For each seed: the quickstart's world, index, tiny model and SFT warm start once
(``common/quickstart_phases.py``), then its PPO phase from that SFT model once per mode and
latency, every search first waiting a seeded lognormal delay around each ``--latency-s`` (sigma
0.5; the same delay for the same query in every mode: ``common/slow_search.py``), a remote
retriever's or a web API's:

* ``sync``: the synchronous trainer (the actor generates, then the roles train, one after
  another), two torch threads per worker: both cores for whichever runs;
* ``aheadK``: ``trainer.max_staleness=K`` with one rollout worker (``resources.rollout_workers=1``,
  ``trainer.partial_rollout=continue``) and one torch thread per worker: the rollout worker on one
  core, the actor, critic and reference, which run one after another, on the other;
* ``groupsK``: ``aheadK`` with each group taken as it finishes (``trainer.take_groups=first_done``):
  a step trains on the first groups done, within the bound, not on the groups drawn for it.

Figures per run: the wall time of ``fit()`` at each validation (``training/elapsed_s``; greedy,
on the held-out questions, every ``trainer.test_freq`` steps) and its EM, the first wall time at
which validation EM reaches ``--target-em`` (the acceptance: ``aheadK`` in at most 0.67x the
``sync`` time of the same seed and latency), the same by training time (``timing_s/step`` summed,
the validations' own time left out in both modes: drawn ahead, a validation runs on the rollout
worker's one core while the update waits), the whole phase's wall time and the last EM, and where
a step's time goes (medians over the steps after the first): ``wait`` is the driver's wait for
the step's rollout (``timing_s/gen`` when it generates, ``timing_s/gen_wait`` for one drawn
ahead), ``passes`` the roles' passes after it (old log-probs, reference, values, both updates);
``outside`` is ``fit()``'s wall time outside its steps (the validations, most of it). Each run's
figures are kept in ``<out>/seed<S>/<mode>_<latency>.json``; a run already measured is not run
again, so an interrupted benchmark resumes (the shared phases are rebuilt: deterministic for a seed).
The report ends with each mode's ratios over the seeds (their mean and their worst).
``--plot`` draws validation EM against wall time (top) and training time (bottom), one column per
latency, one colour per mode, one line style per seed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.common.quickstart_phases import build_shared, ppo_phase_config

SLOW_SEARCH = "benchmarks.common.slow_search.SlowSearchTool"
MODES = {
    "sync": ["resources.torch_threads=2"],
    "ahead2": ["trainer.max_staleness=2"],
    "ahead4": ["trainer.max_staleness=4"],
    "groups2": ["trainer.max_staleness=2", "trainer.take_groups=first_done"],
    "groups4": ["trainer.max_staleness=4", "trainer.take_groups=first_done"],
}
AHEAD = ["resources.rollout_workers=1", "trainer.partial_rollout=continue", "resources.torch_threads=1"]


def slow_tools(url: str, latency_s: float, seed: int, sigma: float | None = None) -> str:
    """``actor.rollout.tools``: the quickstart's search (top-1) behind the seeded delay (log-spread
    ``sigma``; None: the tool's own, 0.5)."""
    spread = "" if sigma is None else f", sigma: {sigma}"
    options = f"{{url: '{url}', topk: 1, median_s: {latency_s}{spread}, latency_seed: {seed}}}"
    return f"actor.rollout.tools=[{{class_path: {SLOW_SEARCH}, options: {options}}}]"


def run_dir_of(out: Path, mode: str, latency_s: float) -> Path:
    """Where a mode's PPO phase at this latency writes its run (its ``metrics.jsonl``)."""
    return out / f"ppo_{mode}_{latency_s:g}"


def measure(mode: str, latency_s: float, shared: dict, out: Path, seed: int, target: float) -> dict:
    from agentrl.quickstart.phases import train_ppo

    extra = MODES[mode] + (AHEAD if mode != "sync" else []) + [slow_tools(shared["url"], latency_s, seed)]
    run_dir = run_dir_of(out, mode, latency_s)
    config = ppo_phase_config(shared, out, run_dir, extra, seed)
    start = time.perf_counter()
    train_ppo(config, shared["sft_dir"])
    phase_s = time.perf_counter() - start
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    curve = [(r.get("training/elapsed_s", 0.0), r["val/all/em"]) for r in rows if "val/all/em" in r]
    reached = first_reaching(curve, target)
    steps = [r["timing_s/step"] for r in rows if "timing_s/step" in r]
    stale = [r["off_policy/staleness_max"] for r in rows if "off_policy/staleness_max" in r]
    return {
        "mode": mode,
        "seed": seed,
        "latency_s": latency_s,
        "curve": curve,
        "seconds_to_target": reached,
        "target_em": target,
        "phase_s": phase_s,
        "step_s_median": statistics.median(steps[1:]) if len(steps) > 1 else float("nan"),
        "last_val_em": curve[-1][1] if curve else float("nan"),
        "staleness_max": max(stale, default=0.0),
        # by groups: the groups a step had to wait for because of the bound, and those mixed in
        "bound_waits": sum(r.get("rollout_buffer/bound_waits", 0.0) for r in rows),
        "draws_in_batch_mean": statistics.mean(r.get("rollout_buffer/draws_in_batch", 1.0) for r in rows),
        **step_split(rows),
        **by_training_time(rows, target),
    }


TRAIN_PASSES = ("old_log_prob", "ref", "values", "update_actor", "update_critic")


def step_split(rows: list[dict]) -> dict:
    """Medians over the steps after the first of the wait for the rollout and of the roles' passes."""
    steps = [r for r in rows if "timing_s/step" in r][1:]
    wait = [r.get("timing_s/gen", r.get("timing_s/gen_wait", 0.0)) for r in steps]
    train = [sum(r.get(f"timing_s/{p}", 0.0) for p in TRAIN_PASSES) for r in steps]
    median = statistics.median
    return {
        "wait_s_median": median(wait) if wait else float("nan"),
        "train_s_median": median(train) if train else float("nan"),
    }


def first_reaching(curve: list[tuple[float, float]], target: float) -> float | None:
    """The first time of a ``(time, EM)`` curve at which EM reaches ``target``; None if it never does."""
    return next((t for t, em in curve if em >= target), None)


def by_training_time(rows: list[dict], target: float) -> dict:
    """The validation curve against training time (the ``timing_s/step`` summed up to each
    validation: ``recipes.curves.minutes_series``, the validations' own time left out, in both
    modes) and the first training time at which EM reaches ``target``."""
    from agentrl.recipes.curves import minutes_series

    minutes, ems = minutes_series(rows, "val/all/em")
    curve = [(60 * m, em) for m, em in zip(minutes, ems, strict=True)]
    reached = first_reaching(curve, target)
    # fit()'s wall time outside its steps: the validations, most of it (checkpoints, logging)
    elapsed = max((r["training/elapsed_s"] for r in rows if "training/elapsed_s" in r), default=0.0)
    outside = elapsed - sum(r.get("timing_s/step", 0.0) for r in rows)
    return {"curve_train": curve, "seconds_to_target_train": reached, "outside_steps_s": outside}


def with_split(figures: dict, out: Path) -> dict:
    """A run's figures with its step split and its curve by training time, read from its metrics
    when its record predates them."""
    if "wait_s_median" not in figures or "outside_steps_s" not in figures:
        run_dir = run_dir_of(out, figures["mode"], figures["latency_s"])
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        figures = {**figures, **step_split(rows), **by_training_time(rows, figures["target_em"])}
    return figures


# each ratio's name and the figure it divides by the synchronous run's
RATIOS = {"to_target": "seconds_to_target", "to_target_train": "seconds_to_target_train", "phase": "phase_s"}


def with_ratios(results: list[dict]) -> list[dict]:
    """Each run with its ratios against the ``sync`` run of the same seed and latency (None where
    either never reached the target, or there is no ``sync`` run): ``to_target`` (wall time to the
    target EM), ``to_target_train`` (training time to it), ``phase`` (the whole phase's wall time)."""
    base = {(r["seed"], r["latency_s"]): r for r in results if r["mode"] == "sync"}
    rows = []
    for r in results:
        sync = base.get((r["seed"], r["latency_s"]))
        ratios = {}
        for name, key in RATIOS.items():
            value, reference = r.get(key), sync.get(key) if sync else None
            ratios[name] = value / reference if value is not None and reference else None
        rows.append({**r, "ratio": ratios})
    return rows


def over_seeds(rows: list[dict]) -> dict[tuple[float, str], dict]:
    """Per latency and mode other than ``sync``: the number of seeds, and each ratio's mean and
    worst over them. A seed without the ratio (it never reached the target) leaves the mean over the
    others and no worst (None)."""
    summary = {}
    for latency in sorted({r["latency_s"] for r in rows}, reverse=True):
        for mode in dict.fromkeys(r["mode"] for r in rows if r["mode"] != "sync"):
            runs = [r for r in rows if r["latency_s"] == latency and r["mode"] == mode]
            if not runs:
                continue
            figures: dict = {"seeds": len(runs)}
            for name in RATIOS:
                values = [r["ratio"][name] for r in runs if r["ratio"][name] is not None]
                figures[name] = {
                    "mean": statistics.mean(values) if values else None,
                    "worst": max(values) if len(values) == len(runs) else None,
                }
            summary[latency, mode] = figures
    return summary


def report(results: list[dict], target: float) -> None:
    """One row per run, then each mode's ratios over the seeds; every ratio is against the ``sync``
    run of the same seed and latency."""
    rows = with_ratios(results)
    to = f"to EM {target:g} s"
    head = f"{'lat s':>5} {'seed':>4} {'mode':<7} {to:>11} {'ratio':>6} {'training s':>10} {'ratio':>6}"
    tail = f"{'phase s':>8} {'ratio':>6} {'s/step':>7} {'wait s':>7} {'passes s':>8} {'outside s':>9}"
    print(f"\n{head} {tail} {'last EM':>8}")
    for r in sorted(rows, key=lambda r: (-r["latency_s"], r["seed"])):
        ratio = r["ratio"]
        print(
            f"{r['latency_s']:>5g} {r['seed']:>4} {r['mode']:<7} {_seconds(r['seconds_to_target']):>11} "
            f"{_shown(ratio['to_target']):>6} {_seconds(r.get('seconds_to_target_train')):>10} "
            f"{_shown(ratio['to_target_train']):>6} {r['phase_s']:>8.0f} {_shown(ratio['phase']):>6} "
            f"{r['step_s_median']:>7.2f} {r['wait_s_median']:>7.2f} {r['train_s_median']:>8.2f} "
            f"{r['outside_steps_s']:>9.0f} {r['last_val_em']:>8.3f}"
        )
    print("\nratios over the seeds, mean / worst: wall time to the target, training time to it, phase")
    for (latency, mode), figures in over_seeds(rows).items():
        shown = "   ".join(f"{_shown(figures[n]['mean'])} / {_shown(figures[n]['worst'])}" for n in RATIOS)
        print(f"{latency:>5g} {mode:<7} {figures['seeds']} seeds   {shown}")


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.0f}"


def _shown(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}"


def plot(results: list[dict], path: Path) -> None:
    """Validation EM by wall time (top row) and training time (bottom), one column per latency, one
    colour per mode, one style per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"sync": "tab:gray", "ahead2": "tab:blue", "ahead4": "tab:orange", "groups2": "tab:green"}
    colours["groups4"] = "tab:red"
    styles = ["-", "--", ":"]
    latencies = sorted({r["latency_s"] for r in results}, reverse=True)
    seeds = sorted({r["seed"] for r in results})
    fig, axes = plt.subplots(2, len(latencies), figsize=(7 * len(latencies), 8), sharey=True, squeeze=False)
    for row, (key, axis) in enumerate(
        (("curve", "wall time of fit() (s)"), ("curve_train", "training time (s)"))
    ):
        for ax, latency in zip(axes[row], latencies, strict=True):
            for r in (r for r in results if r["latency_s"] == latency):
                times, ems = zip(*r[key], strict=True) if r[key] else ((), ())
                style = styles[seeds.index(r["seed"]) % 3]
                ax.plot(
                    times, ems, style, color=colours.get(r["mode"]), label=f"{r['mode']}, seed {r['seed']}"
                )
            ax.axhline(results[0]["target_em"], color="black", linewidth=0.5)
            ax.set_xlabel(axis)
            ax.set_title(f"search latency {latency:g} s (median)")
        axes[row][0].set_ylabel("held-out validation EM (greedy)")
    axes[0][-1].legend(fontsize=7, ncol=3)
    fig.suptitle("PPO on the quickstart world: drawn ahead against synchronous")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/bench_async")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--latency-s", type=float, nargs="+", default=[1.0])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--target-em", type=float, default=0.55)
    parser.add_argument("--short", action="store_true", help="the quickstart's short profile (a smoke run)")
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    results = []
    for seed in args.seeds:
        out = Path(args.out) / f"seed{seed}"
        out.mkdir(parents=True, exist_ok=True)
        runs = [(lat, m) for lat in args.latency_s for m in args.modes]
        path = {(lat, m): out / f"{m}_{lat:g}.json" for lat, m in runs}
        todo = [run for run in runs if not path[run].exists()]
        if todo:
            shared, server = build_shared(out, args.short, seed)
            try:
                for latency, mode in todo:
                    figures = measure(mode, latency, shared, out, seed, args.target_em)
                    path[latency, mode].write_text(json.dumps(figures, indent=2))
            finally:
                server.stop()
        results += [with_split(json.loads(path[run].read_text()), out) for run in runs]
    report(results, args.target_em)
    if args.plot is not None:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
