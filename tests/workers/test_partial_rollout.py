"""A partial rollout in the actor: new weights synced while its rollout generates reach the turns asked
for after them, and every turn's log-probs are those of the weights that sampled it (no Ray)."""

from __future__ import annotations

import copy
import threading

import pytest
import torch

from agentrl.agent.collate import collate
from agentrl.agent.trajectory import PromptSpec
from agentrl.config.schema import ActorConfig, OptimConfig, RolloutConfig, UpdateConfig
from agentrl.workers.actor import ActorWorker
from agentrl.workers.base import RunContext


def actor(model_dir, partial_rollout: str = "continue") -> ActorWorker:
    """A one-step-off actor (its engine holds its own copy) whose random policy never calls a tool:
    each turn ends at its 6-token cap, the format's hint follows, and the next turn begins."""
    section = ActorConfig(
        model_path=str(model_dir),
        optim=OptimConfig(lr=1e-3),
        update=UpdateConfig(mini_batch_size=2, micro_batch_size=2, shuffle=False),
        rollout=RolloutConfig(max_turns=2, max_tokens_per_turn=6, max_obs_length=64),
    )
    context = RunContext(
        seed=0,
        device="cpu",
        total_steps=4,
        max_prompt_length=64,
        max_response_length=128,
        max_staleness=1,
        partial_rollout=partial_rollout,
    )
    return ActorWorker(section, context)


def test_weights_synced_mid_rollout_reach_the_turns_asked_for_after_them_with_their_own_log_probs(
    tiny_model_dir, tokenizer
):
    worker = actor(tiny_model_dir)
    assert worker.engine_link.choice.own_copy  # the rollout drawn ahead samples from its own copy
    worker.sync_engine()  # the copy starts at the trained weights (version 0)
    manager = worker.rollout
    reached, go = threading.Event(), threading.Event()
    hint = manager.format.invalid_turn_message

    def hint_after_the_swap(parse):
        # the first turn back waits here, on the rollout's own loop, while the test loads new weights
        if not reached.is_set():
            reached.set()
            assert go.wait(60)
        return hint(parse)

    manager.format.invalid_turn_message = hint_after_the_swap
    prompt = PromptSpec(tokenizer("Where was Plaimvei founded?")["input_ids"])
    result: dict = {}
    rollout = threading.Thread(
        target=lambda: result.update(run=worker.generate_sequences([prompt], n=2, seed=0, weights_version=0))
    )
    rollout.start()
    assert reached.wait(60)
    old_policy = copy.deepcopy(worker.model)
    with torch.no_grad():  # an update's worth of change to the trained weights
        for param in worker.model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    worker.engine_link.weights_changed()
    assert worker.sync_engine(weights_version=1) is not None  # streamed while the rollout waits
    go.set()
    rollout.join(60)
    trajectories = result["run"].trajectories

    assert [t.turn_versions for t in trajectories] == [[0, 1], [0, 1]]
    batch = collate(trajectories, pad_token_id=tokenizer.pad_token_id)
    versions, mask = batch["response_versions"], batch["response_mask"] > 0
    sampled = batch["rollout_log_probs"]
    new = worker.compute_log_prob(batch)
    worker.model, trained = old_policy, worker.model
    old = worker.compute_log_prob(batch)
    worker.model = trained
    for version, scored, other in ((0, old, new), (1, new, old)):
        tokens = mask & (versions == version)
        assert int(tokens.sum()) >= 6  # a whole turn of each row
        assert (sampled - scored)[tokens].abs().max() < 1e-4
        assert (sampled - other)[tokens].abs().max() > 1e-3  # the two weights do differ there
    worker.shutdown()


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"trainer.partial_rollout": "continue"}, "needs trainer.max_staleness >= 1"),
        (
            {
                "trainer.partial_rollout": "continue",
                "trainer.max_staleness": 1,
                "actor.rollout.engine": "vllm",
            },
            "needs actor.rollout.engine=hf",
        ),
        (
            {
                "trainer.partial_rollout": "recompute",
                "trainer.max_staleness": 1,
                "actor.rollout.continuous_batching": "false",
            },
            "recompute needs actor.rollout.continuous_batching=true",
        ),
    ],
)
def test_a_partial_rollout_is_refused_by_name_off_policy_only_on_hf_and_recomputed_only_when_continuous(
    tiny_model_dir, overrides, needle
):
    from agentrl.config.loader import ConfigError, load_config

    pairs = [f"{k}={v}" for k, v in {"actor.model_path": str(tiny_model_dir), **overrides}.items()]
    with pytest.raises(ConfigError, match=needle):
        load_config(overrides=pairs)


def test_a_recomputing_partial_rollout_reaches_the_actors_engine_from_the_config(tiny_model_dir):
    from agentrl.config.loader import load_config

    pairs = [f"actor.model_path={tiny_model_dir}", "trainer.max_staleness=1"]
    pairs.append("trainer.partial_rollout=recompute")
    assert RunContext.from_config(load_config(overrides=pairs)).partial_rollout == "recompute"
    worker = actor(tiny_model_dir, partial_rollout="recompute")
    assert worker.engine_link.choice.recomputes and worker.engine_link.choice.own_copy
    worker.shutdown()
