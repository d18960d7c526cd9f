"""The quickstart's phases before PPO (world, index, tiny model, retriever, SFT warm start), built once
for a benchmark that runs several PPO phases from the same SFT model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentrl.config.schema import ExperimentConfig


def build_shared(out: Path, short: bool, seed: int) -> tuple[dict, object]:
    """The quickstart's phases before PPO, once for both modes."""
    from agentrl.config import load_config
    from agentrl.quickstart.phases import (
        build_index,
        build_model,
        make_world,
        ppo_overrides,
        record_sft_data,
        start_retriever,
        train_sft,
    )
    from agentrl.quickstart.pipeline import prepare
    from agentrl.quickstart.profiles import FULL, SHORT
    from retriever.process import RetrieverProcess

    profile = SHORT if short else FULL
    out = prepare(out)
    world, files = make_world(out, profile, seed)
    model_dir = build_model(world, profile, out, seed)
    server = RetrieverProcess(build_index(files.corpus, out), log_path=out / "retriever.log")
    config = load_config("ppo", ppo_overrides(profile, out, model_dir, files, server.retrieve_url, [], seed))
    start_retriever(server)
    demos = record_sft_data(world, model_dir, config, profile, out, seed)
    sft = train_sft(model_dir, demos, profile, out, seed)
    shared = {
        "profile": profile,
        "files": files,
        "model_dir": model_dir,
        "url": server.retrieve_url,
        "sft_dir": sft.model_dir,
    }
    return shared, server


def ppo_phase_config(shared: dict, out: Path, run_dir: Path, extra: list[str], seed: int) -> ExperimentConfig:
    """The quickstart's PPO config from the shared SFT model, with ``extra`` overrides, writing to
    ``run_dir`` from scratch (a benchmark's run is never resumed)."""
    from dataclasses import replace

    from agentrl.config import load_config
    from agentrl.quickstart.phases import ppo_overrides

    profile, files = shared["profile"], shared["files"]
    overrides = ppo_overrides(profile, out, shared["model_dir"], files, shared["url"], extra, seed)
    config = load_config("ppo", overrides)
    return replace(config, trainer=replace(config.trainer, run_dir=str(run_dir), resume_mode="disable"))
