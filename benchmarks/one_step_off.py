"""One-step-off-policy vs on-policy training on the quickstart profile: wall time per step and EM.

    python -m benchmarks.one_step_off [--out runs/bench_one_step_off] [--short] [--seed 0]

Builds the quickstart's world, index, tiny model and SFT warm start once, then runs the same
PPO phase three times from that SFT model -- on-policy (the baseline), with
``trainer.one_step_off_policy=true``, and one step off with partial rollouts
(``trainer.partial_rollout=continue``: the rollout in flight takes each update's weights when the
update ends) -- and evaluates each policy on the held-out questions (greedy, as the quickstart
does). Prints the median wall time per training step (step 1 left out: off policy it still waits
for its own rollout), the whole PPO phase, held-out EM, the share of trained tokens sampled by
the weights they train (staleness 0, steps after the first) and the ratios. Each mode's figures
are kept in ``<out>/<mode>.json``; a mode already measured
is not run again, so an interrupted run resumes with the mode it had not finished (the shared
phases are rebuilt: they are deterministic for a seed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.common.quickstart_phases import build_shared, ppo_phase_config

MODES = {
    "on_policy": [],
    "one_step_off": ["trainer.one_step_off_policy=true"],
    "partial": ["trainer.max_staleness=1", "trainer.partial_rollout=continue"],
}


def measure(mode: str, extra: list[str], shared: dict, out: Path, seed: int) -> dict:
    from agentrl.quickstart.phases import evaluate_heldout, train_ppo

    profile, files = shared["profile"], shared["files"]
    run_dir = out / f"ppo_{mode}"
    config = ppo_phase_config(shared, out, run_dir, extra, seed)
    start = time.perf_counter()
    policy = train_ppo(config, shared["sft_dir"])
    ppo_seconds = time.perf_counter() - start
    result = evaluate_heldout(policy, files.test, config, profile.eval_limit, seed).summary
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r["timing_s/step"] for r in rows if "timing_s/step" in r]
    fresh = [r.get("off_policy/staleness_frac/0", 1.0) for r in rows if "timing_s/step" in r][1:]
    return {
        "mode": mode,
        "steps": len(steps),
        "step_s_median": statistics.median(steps[1:]),
        "ppo_phase_s": ppo_seconds,
        "em": result["all"]["em"],
        "searches": result["all"]["searches"],
        "fresh_token_frac": statistics.mean(fresh) if fresh else float("nan"),
        "last_val_em": next((r["val/all/em"] for r in reversed(rows) if "val/all/em" in r), float("nan")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/bench_one_step_off")
    parser.add_argument("--short", action="store_true", help="the quickstart's short profile (a smoke run)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {m: json.loads((out / f"{m}.json").read_text()) for m in MODES if (out / f"{m}.json").exists()}
    if len(results) < len(MODES):
        shared, server = build_shared(out, args.short, args.seed)
        try:
            for mode, extra in MODES.items():
                if mode not in results:
                    results[mode] = measure(mode, extra, shared, out, args.seed)
                    (out / f"{mode}.json").write_text(json.dumps(results[mode], indent=2))
        finally:
            server.stop()
    header = f"{'mode':<14}{'steps':>6}{'s/step':>9}{'PPO s':>9}{'held-out EM':>13}{'searches':>10}"
    print(f"\n{header}{'staleness 0':>13}")
    for r in results.values():
        print(
            f"{r['mode']:<14}{r['steps']:>6}{r['step_s_median']:>9.2f}{r['ppo_phase_s']:>9.0f}"
            f"{r['em']:>13.3f}{r['searches']:>10.2f}{r.get('fresh_token_frac', float('nan')):>13.3f}"
        )
    on = results["on_policy"]
    for mode in ("one_step_off", "partial"):
        off = results[mode]
        print(
            f"{mode} / on-policy: {on['step_s_median'] / off['step_s_median']:.2f}x steps/s (median step), "
            f"{on['ppo_phase_s'] / off['ppo_phase_s']:.2f}x the whole PPO phase; "
            f"EM {off['em'] - on['em']:+.3f}"
        )


if __name__ == "__main__":
    main()
