"""The real tiny model through HFEngine, end to end: invariants on whatever it generates.

Both tool-call formats (``hermes`` with the project's Hermes-style template): every sampled
token is trained and kept as sampled, every inserted token is masked, and the engine's
log-probs match an independent forward of the model over the collated batch.
"""

from __future__ import annotations

import pytest
import torch
from support.dialects import DIALECTS
from support.prompts import question_prompt
from support.scripted_engine import RecordingEngine, assert_rollout_invariants

from agentrl.agent import LLMGenerationManager, Segment, rollout_metrics
from agentrl.config.schema import RolloutConfig
from agentrl.engines.base import SamplingParams
from agentrl.models.forward import policy_forward
from agentrl.tools.calculator import CalculatorTool
from agentrl.tools.retrieval.search import SearchTool

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


@pytest.fixture(scope="module")
def tiny_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()


@pytest.fixture(scope="module")
def hf_engine(tiny_model, tiny_model_dir):
    from transformers import AutoTokenizer

    from agentrl.engines.hf import HFEngine

    return HFEngine(tiny_model, AutoTokenizer.from_pretrained(tiny_model_dir), max_batch_size=16)


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
@pytest.mark.parametrize("schedule", ["concurrent", "lockstep"])
def test_tiny_model_rollout_invariants(hf_engine, tiny_model, tokenizer, retriever_url, schedule, dialect):
    engine = RecordingEngine(hf_engine)
    config = RolloutConfig(
        schedule=schedule,
        max_turns=2,
        max_tokens_per_turn=24,
        max_obs_length=128,
        check_token_drift=True,
        **dialect.config,
    )
    manager = LLMGenerationManager(
        engine,
        tokenizer,
        config,
        tools=[SearchTool(retriever_url), CalculatorTool()],
        max_prompt_length=1024,  # hermes: the tools' schemas are in the prompt
        max_response_length=160,
    )
    specs = [
        question_prompt(tokenizer, q, index=i)
        for i, q in enumerate(["What is the capital of France?", "Who wrote Pride and Prejudice?"])
    ]
    trajs = manager.run(specs, SamplingParams(max_new_tokens=24, temperature=1.0, seed=7), n=2).trajectories
    batch = assert_rollout_invariants(trajs, engine, tokenizer)

    assert len(trajs) == 4 and len({t.group_id for t in trajs}) == 2
    for t in trajs:
        assert 1 <= t.num_turns <= config.max_turns + 1
        assert len(t.response_ids) <= 160
        # a random model rarely writes a tag, so turns end by budget/eos and get the hint
        assert t.num_model_tokens > 0
        if t.num_turns > 1:
            assert any(seg == Segment.OBSERVATION for seg, _, _ in t.segment_spans)
        assert t.token_drift is not None and t.token_drift >= 0
    stops = {c.params.stop for c in engine.calls}
    if dialect.name == "tags":
        assert stops <= {("</search>", "</calculate>", "</answer>"), ("</answer>",)}
    else:  # a hermes turn ends at the template's end-of-turn token: the engine's eos
        assert stops == {()}
    metrics = rollout_metrics(trajs)
    assert "rollout/token_drift_total" in metrics

    # the engine's log-probs are the model's, token for token, in a forward over the whole batch
    with torch.no_grad():
        log_probs, _ = policy_forward(tiny_model, batch, temperature=1.0)
    mask = batch["response_mask"]
    assert mask.sum() > 0
    torch.testing.assert_close(log_probs * mask, batch["rollout_log_probs"] * mask, atol=2e-4, rtol=1e-4)


def test_a_rollout_split_into_chunks_numbered_by_first_row_samples_what_the_whole_one_does(
    hf_engine, tokenizer, retriever_url
):
    """What lets N ranks sample what one rank does (``ActorWorker.generate_sequences``)."""
    config = RolloutConfig(schedule="lockstep", max_turns=1, max_tokens_per_turn=16, max_obs_length=64)
    manager = LLMGenerationManager(
        hf_engine,
        tokenizer,
        config,
        tools=[SearchTool(retriever_url)],
        max_prompt_length=512,
        max_response_length=96,
    )
    questions = ["What is the capital of France?", "Who wrote Emma?", "Where is Lima?", "Who is Ada?"]
    specs = [question_prompt(tokenizer, q, index=i) for i, q in enumerate(questions)]
    sampling = SamplingParams(max_new_tokens=16, temperature=1.0, seed=3)
    whole = manager.run(specs, sampling, n=2).trajectories
    chunks = manager.run(specs[:1], sampling, n=2).trajectories
    chunks += manager.run(specs[1:], sampling, n=2, first_row=2).trajectories
    assert [t.response_ids for t in chunks] == [t.response_ids for t in whole]
    # without the numbering the second chunk would draw the first rows' streams again
    unnumbered = manager.run(specs[1:], sampling, n=2).trajectories
    assert [t.response_ids for t in unnumbered] != [t.response_ids for t in whole[2:]]
