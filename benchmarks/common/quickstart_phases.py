"""The quickstart's phases before PPO (world, index, tiny model, retriever, SFT warm start), built once
for a benchmark that runs several PPO phases from the same SFT model."""

from __future__ import annotations

from pathlib import Path


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
