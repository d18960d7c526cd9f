"""Demonstrations recorded from scripted turns through the real rollout (``agentrl.agent.demonstrations``).

Real components throughout: a tiny random Qwen2 model's tokenizer, the real rollout manager
and a real BM25 retriever server (``RetrieverProcess``) over the synthetic world's passages.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from agentrl.agent.demonstrations import record_scripted_trajectories
from agentrl.agent.observations import ObservationEncoder, encode_text
from agentrl.agent.prompts import encode_messages
from agentrl.agent.trajectory import PromptSpec, Segment
from agentrl.config.schema import RolloutConfig
from agentrl.data.qa import make_prompt
from agentrl.data.world import generate_world, oracle_trajectory, write_world
from agentrl.models.loading import load_tokenizer
from agentrl.models.tiny import make_tiny_model_dir
from agentrl.tools.retrieval.search import SearchTool, format_documents
from retriever.build_index import main as build_index
from retriever.process import RetrieverProcess

M, OBS = int(Segment.MODEL), int(Segment.OBSERVATION)


@pytest.fixture(scope="module")
def tiny_world(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("demo_world")
    world = generate_world(seed=3, num_countries=4, num_people=6, num_companies=3, num_distractors=4)
    paths = write_world(world, root / "world")
    texts = [p["contents"] for p in world.passages] + [make_prompt(q.question) for q in world.train_questions]
    texts += [t.text for q in world.train_questions for t in oracle_trajectory(q)]
    model_dir = make_tiny_model_dir(root / "model", texts=texts, size="nano", seed=0)
    assert (
        build_index(
            ["--corpus", str(paths["corpus"]), "--backend", "bm25", "--out", str(root / "index"), "--quiet"]
        )
        == 0
    )
    return world, model_dir, root


def test_scripted_oracle_turns_carry_the_observation_tokens_the_rollout_inserts(tiny_world, tmp_path):
    """Demonstrations carry exactly the observation tokens the rollout inserts at RL time."""
    world, model_dir, root = tiny_world
    tokenizer = load_tokenizer(model_dir)
    questions = [q for q in world.train_questions if q.hop == 2][:3] + [
        q for q in world.train_questions if q.hop == 1
    ][:3]
    prompts = [
        PromptSpec(
            encode_messages(tokenizer, [{"role": "user", "content": make_prompt(q.question)}]), index=i
        )
        for i, q in enumerate(questions)
    ]
    scripts = [[t.text for t in oracle_trajectory(q)] for q in questions]
    rollout = RolloutConfig(max_turns=2, max_tokens_per_turn=96, max_obs_length=160, schedule="lockstep")
    with RetrieverProcess(root / "index", log_path=tmp_path / "r.log") as server:
        tool = SearchTool(url=server.retrieve_url, topk=1)
        complete, incomplete = record_scripted_trajectories(
            prompts, scripts, tokenizer, rollout, max_prompt_length=400, max_response_length=900, tools=[tool]
        )
        assert not incomplete and len(complete) == len(questions)
        encoder = ObservationEncoder(tokenizer, rollout.max_obs_length)
        for traj, q, script in zip(complete, questions, scripts, strict=True):
            spans = traj.segment_spans
            assert [s for s, _, _ in spans] == [M, OBS] * q.hop + [M]
            model_runs = [traj.response_ids[a:b] for s, a, b in spans if s == M]
            assert model_runs == [encode_text(tokenizer, t) for t in script]
            for k, (_, a, b) in enumerate(s for s in spans if s[0] == OBS):
                passage = next(p for p in world.passages if p["id"] == q.chain[k].passage_id)

                final = k + 1 >= rollout.max_turns
                assert (
                    traj.response_ids[a:b]
                    == encoder.encode(format_documents([passage]), final_turn=final).ids
                )
            assert traj.finished and traj.tool_calls == {"search": q.hop}

        # A per-turn budget below the turns' length cuts them: reported apart, never trained on.
        short = RolloutConfig(max_turns=2, max_tokens_per_turn=8, max_obs_length=160, schedule="concurrent")
        complete, incomplete = record_scripted_trajectories(
            prompts, scripts, tokenizer, short, max_prompt_length=400, max_response_length=900, tools=[tool]
        )
        assert not complete and len(incomplete) == len(questions)

        # An observation cut to max_obs_length is incomplete, unless the caller accepts that cut
        # (real passages are long; RL sees the same cut); other cuts still are not.
        tight = RolloutConfig(max_turns=2, max_tokens_per_turn=96, max_obs_length=40, schedule="lockstep")
        kwargs = {"max_prompt_length": 400, "max_response_length": 900, "tools": [tool]}
        complete, incomplete = record_scripted_trajectories(prompts, scripts, tokenizer, tight, **kwargs)
        assert not complete and all(t.truncation.observations_cut for t in incomplete)
        complete, incomplete = record_scripted_trajectories(
            prompts, scripts, tokenizer, tight, allow_observation_cut=True, **kwargs
        )
        assert len(complete) == len(questions) and all(t.truncation.observations_cut for t in complete)
        cut_turns = replace(tight, max_tokens_per_turn=8)
        complete, _ = record_scripted_trajectories(
            prompts, scripts, tokenizer, cut_turns, allow_observation_cut=True, **kwargs
        )
        assert not complete
    assert server.proc.returncode == 0, "SIGTERM must stop the server cleanly"
    with pytest.raises(ValueError, match="distinct"):
        record_scripted_trajectories(
            prompts[:1] * 2,
            scripts[:1] * 2,
            tokenizer,
            rollout,
            max_prompt_length=400,
            max_response_length=900,
            tools=[tool],
        )


def test_scripts_must_match_the_prompts_one_to_one_and_be_non_empty():
    prompts = [PromptSpec([1, 2]), PromptSpec([3, 4])]
    kwargs = {"max_prompt_length": 8, "max_response_length": 8}
    with pytest.raises(ValueError, match="2 prompts but 1 turn scripts"):
        record_scripted_trajectories(prompts, [["<answer>a</answer>"]], None, RolloutConfig(), **kwargs)
    with pytest.raises(ValueError, match=r"turns\[1\] is empty"):
        record_scripted_trajectories(prompts, [["<answer>a</answer>"], []], None, RolloutConfig(), **kwargs)
