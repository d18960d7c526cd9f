"""The real tiny model through HFEngine, end to end: invariants on whatever it generates."""

from __future__ import annotations

import pytest
from support.prompts import question_prompt
from support.scripted_engine import RecordingEngine, assert_rollout_invariants

from agentrl.agent import LLMGenerationManager, Segment, rollout_metrics
from agentrl.agent.tools.calculator import CalculatorTool
from agentrl.agent.tools.search import SearchTool
from agentrl.config.schema import RolloutConfig
from agentrl.engines.base import SamplingParams

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


@pytest.fixture(scope="module")
def hf_engine(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.engines.hf import HFEngine

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    return HFEngine(model, AutoTokenizer.from_pretrained(tiny_model_dir), max_batch_size=16)


@pytest.mark.parametrize("schedule", ["concurrent", "lockstep"])
def test_tiny_model_rollout_invariants(hf_engine, tokenizer, retriever_url, schedule):
    engine = RecordingEngine(hf_engine)
    config = RolloutConfig(
        schedule=schedule, max_turns=2, max_tokens_per_turn=24, max_obs_length=128, check_token_drift=True
    )
    manager = LLMGenerationManager(
        engine,
        tokenizer,
        config,
        tools=[SearchTool(retriever_url), CalculatorTool()],
        max_prompt_length=512,
        max_response_length=160,
    )
    specs = [
        question_prompt(tokenizer, q, index=i)
        for i, q in enumerate(["What is the capital of France?", "Who wrote Pride and Prejudice?"])
    ]
    trajs = manager.run(specs, SamplingParams(max_new_tokens=24, temperature=1.0, seed=7), n=2).trajectories
    assert_rollout_invariants(trajs, engine, tokenizer)

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
    assert stops <= {("</search>", "</calculate>", "</answer>"), ("</answer>",)}
    metrics = rollout_metrics(trajs)
    assert "rollout/token_drift_total" in metrics
