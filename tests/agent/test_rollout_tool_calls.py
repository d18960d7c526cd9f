"""Tool calls through the real rollout in the ``hermes`` format, in both schedules.

A scripted policy (``support.scripted_engine.ScriptedEngine``: the project's scripted
engine, ending turns as a real engine does) plays the turns; the rollout, the format, the
dispatcher and the tools are the real ones. What is promised: a trajectory's ids are the
chat template's render of its conversation; a turn's calls run concurrently and come back
in call order; the call budgets are kept and said; every kind of malformed call becomes an
error observation, counted by reason, with no exception and no trajectory lost or
duplicated; tool sessions close with their trajectory; the reward's ``format_penalty``.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from support.dialects import Dialect
from support.scripted_engine import ScriptedEngine, assert_rollout_invariants
from support.tool_conversations import (
    SPECS,
    THREE_TURNS,
    call_block,
    rendered_up_to_last_turn,
    whole_conversation,
)

from agentrl.agent import LLMGenerationManager, PromptSpec, collate
from agentrl.agent.formats import HERMES_TEMPLATE
from agentrl.agent.formats.hermes import INVALID_TURN_HINT
from agentrl.agent.generation import prompt_encoder
from agentrl.agent.observations import FINAL_TURN_NOTE
from agentrl.agent.prompts import encode_messages
from agentrl.config.schema import ExperimentConfig, RewardConfig, RolloutConfig
from agentrl.models.tiny import DEFAULT_TEXTS, train_tokenizer
from agentrl.tool_identity import HERMES as HERMES_FORMAT
from agentrl.tool_identity import ToolIdentity
from agentrl.tools.base import ToolResult
from agentrl.tools.spec import ToolSpec
from agentrl.trainer.dataset import prompt_spec
from agentrl.workers.base import RunContext
from agentrl.workers.reward import RuleRewardWorker

pytestmark = pytest.mark.timeout(120)

HERMES = Dialect("hermes")
SCHEDULES = ["concurrent", "lockstep"]
ONE_STRING = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


class EchoTool:
    """A schema tool answering each call with its arguments, after ``latency_s``."""

    timeout_s = 5.0

    def __init__(self, name: str, parameters: dict | None = None, latency_s: float = 0.0) -> None:
        self.spec = ToolSpec(name, f"The {name} tool.", parameters or ONE_STRING)
        self.latency_s = latency_s

    async def call(self, arguments: list[dict]) -> list[ToolResult]:
        await asyncio.sleep(self.latency_s)
        return [ToolResult(f"{self.spec.name} says {sorted(a.items())}") for a in arguments]


class ScriptedResults:
    """A schema tool whose result for each argument set is given (the conversation's)."""

    timeout_s = 5.0

    def __init__(self, spec: ToolSpec, results: dict[str, str]) -> None:
        self.spec = spec
        self.results = results

    async def call(self, arguments: list[dict]) -> list[ToolResult]:
        return [ToolResult(self.results[next(iter(a.values()))]) for a in arguments]


class Counter:
    """A stateful tool: each trajectory's session counts its calls; opens and closes are kept."""

    timeout_s = 5.0
    spec = ToolSpec("count", "Count.", {"type": "object", "properties": {}})

    def __init__(self) -> None:
        self.opened = 0
        self.closed = 0

    async def open_session(self):
        tool = self
        tool.opened += 1

        class Session:
            n = 0

            async def call(self, arguments: dict) -> ToolResult:
                self.n += 1
                return ToolResult(str(self.n))

            async def close(self) -> None:
                tool.closed += 1

        return Session()


class Boom:
    """A tool that always fails."""

    timeout_s = 5.0
    spec = ToolSpec("boom", "Fails.", {"type": "object", "properties": {}})

    async def call(self, arguments: list[dict]) -> list[ToolResult]:
        raise RuntimeError("boom")


def hermes_prompt(tokenizer, question: str, index: int = 0, target: str = "done") -> PromptSpec:
    messages = [{"role": "user", "content": question}]
    return PromptSpec(
        encode_messages(tokenizer, messages), "nq", {"target": [target]}, index, messages=messages
    )


def hermes_manager(engine, tokenizer, tools, *, schedule="concurrent", **fields) -> LLMGenerationManager:
    config = RolloutConfig(
        **{
            "schedule": schedule,
            "max_turns": 3,
            "max_tokens_per_turn": 256,
            "max_obs_length": 512,
            **HERMES.config,
            **fields,
        }
    )
    return LLMGenerationManager(
        engine, tokenizer, config, tools=tools, max_prompt_length=1024, max_response_length=4096
    )


def turn_of(context: str) -> int:
    """Which turn the policy is writing: the observations the context holds so far."""
    return HERMES.results_seen(context)


def calls(*pairs: tuple[str, dict]) -> str:
    return "\n".join(call_block(name, arguments) for name, arguments in pairs)


# --- token-exact ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def call_token_tokenizer():
    return train_tokenizer(DEFAULT_TEXTS, vocab_size=512, tool_call_tokens=True)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("which", ["default", "tool_call_tokens"])
def test_a_hermes_trajectory_is_the_templates_render_of_its_conversation(
    tokenizer, call_token_tokenizer, schedule, which
):
    """1, 2 and 3 calls a turn, then the answer: the ids decode to the template's render of the
    whole conversation, sampled ids kept, every template and tool token masked."""
    tok = tokenizer if which == "default" else call_token_tokenizer
    results = {
        next(iter(arguments.values())): result
        for turn in THREE_TURNS
        for (_, arguments), result in zip(turn.calls, turn.results, strict=True)
    }
    tools = [ScriptedResults(spec, results) for spec in SPECS]
    engine = ScriptedEngine(tok, lambda ctx: THREE_TURNS[turn_of(ctx)].text(""))
    manager = hermes_manager(engine, tok, tools, schedule=schedule, max_turns=4)
    question = "Where is the Eiffel Tower?"
    (t,) = manager.run([hermes_prompt(tok, question)]).trajectories
    assert_rollout_invariants([t], engine, tok)

    expected = rendered_up_to_last_turn(
        tok, whole_conversation(question, THREE_TURNS), "<|im_end|>", chat_template=HERMES_TEMPLATE
    )
    assert tok.decode(t.prompt_ids + t.response_ids, skip_special_tokens=False) == expected
    assert t.prompt_ids == manager.format.prompt_ids([{"role": "user", "content": question}], manager.specs)
    assert (t.num_turns, t.finished, t.answer, t.num_tool_calls) == (4, True, "Paris", 6)
    assert [(c.turn, c.name, c.arguments, c.status) for c in t.calls] == [
        (k, name, arguments, "ok") for k, turn in enumerate(THREE_TURNS) for name, arguments in turn.calls
    ]
    assert [text for _, text in t.tool_outputs] == [r for turn in THREE_TURNS for r in turn.results]


# --- parallel calls and budgets -------------------------------------------------------------


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_three_calls_of_one_turn_run_at_once_and_come_back_in_call_order(tokenizer, schedule):
    latency = 0.6
    tools = [EchoTool(f"slow{i}", latency_s=latency) for i in range(3)]
    turn = calls(*((f"slow{i}", {"query": f"q{i}"}) for i in (2, 0, 1)))
    engine = ScriptedEngine(tokenizer, lambda ctx: turn if turn_of(ctx) == 0 else "<answer> done </answer>")
    manager = hermes_manager(engine, tokenizer, tools, schedule=schedule)
    start = time.perf_counter()
    (t,) = manager.run([hermes_prompt(tokenizer, "Three at once?")]).trajectories
    elapsed = time.perf_counter() - start
    assert elapsed < 1.5 * latency, f"three calls of latency {latency}s took {elapsed:.2f}s"
    assert [c.name for c in t.calls] == ["slow2", "slow0", "slow1"]
    text = tokenizer.decode(t.response_ids)
    assert text.index("slow2 says") < text.index("slow0 says") < text.index("slow1 says")
    assert t.tool_calls == {"slow0": 1, "slow1": 1, "slow2": 1} and t.finished


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_the_call_budgets_are_kept_and_said_in_the_observation(tokenizer, schedule):
    """Two calls a turn, three a trajectory: the third call of a turn and the fourth sent are not
    run, each gets a message naming its budget, and the trajectory's budget ends the calling."""
    turns = [
        calls(*(("search", {"query": f"q{i}"}) for i in range(3))),
        calls(("search", {"query": "q3"}), ("search", {"query": "q4"})),
    ]

    def policy(ctx: str) -> str:
        return "<answer> done </answer>" if FINAL_TURN_NOTE in ctx else turns[turn_of(ctx)]

    engine = ScriptedEngine(tokenizer, policy)
    manager = hermes_manager(
        engine,
        tokenizer,
        [EchoTool("search")],
        schedule=schedule,
        max_turns=5,
        max_calls_per_turn=2,
        max_calls_per_trajectory=3,
    )
    result = manager.run([hermes_prompt(tokenizer, "Budgets?")])
    (t,) = result.trajectories
    assert_rollout_invariants([t], engine, tokenizer)
    assert [(c.turn, c.arguments["query"], c.status) for c in t.calls] == [
        (0, "q0", "ok"),
        (0, "q1", "ok"),
        (0, "q2", "over_budget"),
        (1, "q3", "ok"),
        (1, "q4", "over_budget"),
    ]
    assert "the budget of one turn" in t.calls[2].message and "for the whole task" in t.calls[4].message
    text = tokenizer.decode(t.response_ids)
    assert t.calls[2].message in text and t.calls[4].message in text
    # the trajectory's budget used up: the next turn is the final one, and its observation says so
    assert text.count(FINAL_TURN_NOTE) == 1 and (t.num_turns, t.finished) == (3, True)
    assert t.tool_calls == {"search": 3} and t.calls_over_budget == 2 and t.tool_calls_invalid == {}
    assert result.metrics["rollout/call_budget_hits_total"] == 2


# --- malformed calls ------------------------------------------------------------------------

NESTED = "[" * 1200  # 1221 tokens; json gives up on this with a RecursionError, not a JSONDecodeError
LONG = (
    '<tool_call>\n{"name": "search", "arguments": {"query": "' + "a very long query " * 200
)  # over 2000 tokens: past the 1500 a turn may take

# (kind, the malformed turn, the reason it is counted under, what the policy reads back)
MALFORMED = [
    (
        "invalid JSON",
        '<tool_call>\n{"name": "search", "arguments": {"query": "x"}\n</tool_call>',
        "invalid_json",
        "the call is not valid JSON",
    ),
    ("JSON nested too deeply", f"<tool_call>{NESTED}</tool_call>", "invalid_json", "nests too deeply"),
    (
        "JSON that is not an object",
        '<tool_call>\n["search", {"query": "x"}]\n</tool_call>',
        "not_an_object",
        "must be one JSON object, got a list",
    ),
    ("no name", '<tool_call>\n{"arguments": {"query": "x"}}\n</tool_call>', "missing_name", 'has no "name"'),
    (
        "a name that is not a string",
        '<tool_call>\n{"name": 7, "arguments": {}}\n</tool_call>',
        "missing_name",
        "must be a string",
    ),
    ("an unknown tool", calls(("serch", {"query": "x"})), "unknown_tool", "did you mean 'search'"),
    (
        "arguments that are not an object",
        '<tool_call>\n{"name": "search", "arguments": "x"}\n</tool_call>',
        "bad_arguments",
        "must be a JSON object, got a string",
    ),
    ("a required argument missing", calls(("search", {"q": "x"})), "schema", "query"),
    ("an argument of the wrong type", calls(("lookup", {"table": "t", "row": "two"})), "schema", "row"),
    ("a call cut by the token budget", LONG, "truncated", "cut by the token budget"),
    (
        "a call never closed",
        '<tool_call>\n{"name": "search", "arguments": {"query": "x"}}',
        "unclosed",
        "was never closed",
    ),
    ("an empty call", "<tool_call>\n</tool_call>", "empty", "empty <tool_call>"),
    ("no call and no answer", "I would rather not say.", "no_action", INVALID_TURN_HINT),
    ("an empty answer", "<answer>   </answer>", "empty", INVALID_TURN_HINT),
]
LOOKUP = {
    "type": "object",
    "properties": {"table": {"type": "string"}, "row": {"type": "integer"}},
    "required": ["table", "row"],
}


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_kind_of_malformed_call_is_an_error_observation_counted_by_reason(tokenizer, schedule):
    """Each kind in ``MALFORMED`` (and a turn with a good call before a bad one), two samples
    each: the policy reads an error it can learn from, the reason is counted, the next turn
    answers, and every trajectory comes back once, in its place, without an exception."""
    good_then_bad = calls(("search", {"query": "fine"})) + '\n<tool_call>\n{"name": }\n</tool_call>'
    cases = [*MALFORMED, ("a good call, then a bad one", good_then_bad, "invalid_json", "not valid JSON")]

    def policy(ctx: str) -> str:
        if turn_of(ctx):
            return "<answer> done </answer>"
        return cases[int(ctx.split("case ", 1)[1].split(":", 1)[0])][1]

    engine = ScriptedEngine(tokenizer, policy)
    tools = [EchoTool("search"), EchoTool("lookup", LOOKUP)]
    manager = hermes_manager(engine, tokenizer, tools, schedule=schedule, max_tokens_per_turn=1500)
    specs = [hermes_prompt(tokenizer, f"case {i}: {kind}?", index=i) for i, (kind, *_) in enumerate(cases)]
    result = manager.run(specs, n=2)
    trajs = result.trajectories
    assert_rollout_invariants(trajs, engine, tokenizer)

    assert [t.prompt.index for t in trajs] == [i for i in range(len(cases)) for _ in range(2)]
    assert len({t.uid for t in trajs}) == 2 * len(cases), "a trajectory lost or duplicated"
    for t in trajs:
        kind, _, reason, says = cases[t.prompt.index]
        assert t.tool_calls_invalid == {reason: 1}, kind
        assert (t.num_turns, t.finished, t.answer) == (2, True, "done"), kind
        observation = tokenizer.decode(t.response_ids[t.segment_spans[1][1] : t.segment_spans[1][2]])
        assert t.segment_spans[1][0] == 2 and says in observation, kind
        assert t.tool_failures == 0, kind
    truncated = [t for t in trajs if cases[t.prompt.index][2] == "truncated"]
    assert all(t.truncation.turn_budget_hits == 1 and t.finish_reasons[0] == "length" for t in truncated)
    # the good call still ran, and its result comes first
    for t in trajs[-2:]:
        assert [c.status for c in t.calls] == ["ok", "invalid/invalid_json"] and t.tool_calls == {"search": 1}
    expected: dict[str, float] = {}
    for _, _, reason, _ in cases:
        expected[reason] = expected.get(reason, 0) + 2
    for reason, count in expected.items():
        assert result.metrics[f"rollout/tool_calls/invalid/{reason}"] == count, reason
    assert result.metrics["rollout/tool_calls/invalid/invalid_json"] == 6


def test_the_format_penalty_is_taken_from_the_score_of_a_trajectory_with_a_malformed_call(tokenizer):
    def policy(ctx: str) -> str:
        if turn_of(ctx):
            return "<answer> done </answer>"
        return calls(("search", {"query": "x"})) if "clean" in ctx else calls(("serch", {"query": "x"}))

    engine = ScriptedEngine(tokenizer, policy)
    manager = hermes_manager(engine, tokenizer, [EchoTool("search")])
    trajs = manager.run(
        [hermes_prompt(tokenizer, "clean?", 0), hermes_prompt(tokenizer, "sloppy?", 1)]
    ).trajectories
    batch = collate(trajs, tokenizer.pad_token_id, tokenizer)
    assert batch["tool_calls_invalid"].tolist() == [{}, {"unknown_tool": 1}]
    context = RunContext.from_config(ExperimentConfig())
    plain, plain_metrics = RuleRewardWorker(RewardConfig(), context).compute_scores(batch)
    penalised, metrics = RuleRewardWorker(RewardConfig(format_penalty=0.25), context).compute_scores(batch)
    assert plain.tolist() == [1.0, 1.0] and "reward/format_penalized" not in plain_metrics
    assert penalised.tolist() == [1.0, 0.75] and metrics["reward/format_penalized"] == 0.5


def test_the_reward_and_the_evaluator_count_a_hermes_runs_calls_per_tool_from_the_rollout(tokenizer):
    """The reward role of a hermes run checks the format on the rollout's record (the batch's
    tool_calls, tool_calls_invalid, tool_outputs), so a clean hermes trajectory is well formed
    and its calls are counted per tool, as the evaluator's records count them."""
    from agentrl.eval.records import records_of
    from agentrl.eval.report import aggregate

    def policy(ctx: str) -> str:
        if turn_of(ctx):
            return "<answer> Quenby </answer>"
        return calls(("lookup", {"query": "Zorvia"})) if "clean" in ctx else calls(("lookup", {"q": 1}))

    engine = ScriptedEngine(tokenizer, policy)
    lookup = ScriptedResults(ToolSpec("lookup", "Look a name up.", ONE_STRING), {"Zorvia": "Quenby"})
    manager = hermes_manager(engine, tokenizer, [EchoTool("search"), lookup])
    prompts = [hermes_prompt(tokenizer, q, i, "Quenby") for i, q in enumerate(["clean?", "sloppy?"])]
    trajs = manager.run(prompts).trajectories
    batch = collate(trajs, tokenizer.pad_token_id, tokenizer)
    assert batch["tool_outputs"].tolist() == [["Quenby"], []]
    hermes_tools = ToolIdentity.of_tags(("search", "lookup"), HERMES_FORMAT)
    context = RunContext.from_config(ExperimentConfig(), hermes_tools)
    scores, metrics = RuleRewardWorker(RewardConfig(format_score=True), context).compute_scores(batch)
    assert scores.tolist() == [1.0, pytest.approx(0.8)]  # the sloppy call failed its schema: ill formed
    assert metrics["reward/well_formed"] == 0.5 and metrics["reward/retrieval_hit"] == 0.5
    assert metrics["reward/tool_calls/lookup"] == 0.5 and metrics["reward/tool_calls/search"] == 0.0
    # the tags run's grammar finds no call in the same text: what a hermes run scored before
    tags = RunContext.from_config(ExperimentConfig(), ToolIdentity.of_tags(("search", "lookup")))
    _, tag_metrics = RuleRewardWorker(RewardConfig(format_score=True), tags).compute_scores(batch)
    assert tag_metrics["reward/well_formed"] == 0.0 and tag_metrics["reward/tool_calls/lookup"] == 0.0

    records = records_of(trajs, tokenizer)
    assert [r["tool_calls"] for r in records] == [{"lookup": 1}, {}]
    assert [r["em"] for r in records] == [1.0, 1.0] and [r["num_searches"] for r in records] == [0, 0]
    summary = aggregate(records, key="data_source", tools=["search", "lookup"])["nq"]
    assert summary["tool_calls/lookup"] == 0.5 and summary["tool_calls/search"] == 0.0


# --- sessions -------------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_each_trajectory_has_its_own_session_and_none_outlives_it(tokenizer, schedule):
    turns = [calls(("count", {}), ("count", {})), calls(("count", {})), "<answer> done </answer>"]
    engine = ScriptedEngine(tokenizer, lambda ctx: turns[turn_of(ctx)])
    counter = Counter()
    manager = hermes_manager(engine, tokenizer, [counter], schedule=schedule)
    trajs = manager.run([hermes_prompt(tokenizer, f"count {i}?", i) for i in range(3)], n=2).trajectories
    assert len(trajs) == 6
    for t in trajs:  # state carries over between the calls of one trajectory, and only those
        assert [c.message for c in t.calls] == ["1", "2", "3"] and t.finished
    assert counter.opened == counter.closed == 6


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_sessions_are_closed_when_the_rollout_fails(tokenizer, schedule):
    """Under ``tool_error_policy=raise`` one failing call fails the rollout; every session
    opened by then is closed all the same."""

    def policy(ctx: str) -> str:
        if "fail" in ctx and turn_of(ctx) == 1:
            return calls(("boom", {}))
        return calls(("count", {})) if turn_of(ctx) < 2 else "<answer> done </answer>"

    engine = ScriptedEngine(tokenizer, policy)
    counter = Counter()
    manager = hermes_manager(
        engine, tokenizer, [counter, Boom()], schedule=schedule, tool_error_policy="raise"
    )
    specs = [hermes_prompt(tokenizer, q, i) for i, q in enumerate(["ok?", "fail?", "fine?"])]
    with pytest.raises(RuntimeError, match="boom"):
        manager.run(specs)
    assert counter.opened >= 1 and counter.opened == counter.closed


# --- prompts --------------------------------------------------------------------------------


def test_the_training_data_is_encoded_as_the_rollout_encodes_it(tokenizer):
    """The data's length check sees the prompt the rollout generates from: in hermes, with the
    tools' schemas; in tags, the data's own encoding, unchanged."""
    row = {
        "data_source": "nq",
        "prompt": [{"role": "user", "content": "What is the capital of France?"}],
        "reward_model": {"ground_truth": {"target": ["Paris"]}},
    }
    tools = [EchoTool("search")]
    spec = prompt_spec(
        row, tokenizer, encode=prompt_encoder(RolloutConfig(**HERMES.config), tokenizer, tools)
    )
    manager = hermes_manager(ScriptedEngine(tokenizer, lambda ctx: ""), tokenizer, tools)
    assert manager.encode_prompt(spec).prompt_ids == spec.prompt_ids
    assert '"name": "search"' in tokenizer.decode(spec.prompt_ids, skip_special_tokens=False)
    plain = prompt_spec(row, tokenizer)
    assert spec.messages == plain.messages == row["prompt"]
    assert prompt_encoder(RolloutConfig(), tokenizer, tools)(row["prompt"]) == plain.prompt_ids
    assert "question" not in plain.extra_info  # a row without one adds none
    asked = prompt_spec(row | {"question": "What is the capital of France?"}, tokenizer)
    assert asked.extra_info["question"] == "What is the capital of France?"  # what an LLM judge reads


# --- refusals -------------------------------------------------------------------------------


def test_hermes_refuses_a_prompt_without_its_messages_and_bad_budgets_are_refused_by_name(tokenizer):
    engine = ScriptedEngine(tokenizer, lambda ctx: "<answer> x </answer>")
    manager = hermes_manager(engine, tokenizer, [EchoTool("search")])
    with pytest.raises(ValueError, match="tool_format=hermes renders each prompt from its chat messages"):
        manager.run([PromptSpec([1, 2, 3])])
    for field, value in (("max_calls_per_turn", 0), ("max_calls_per_trajectory", 0)):
        with pytest.raises(ValueError, match=f"rollout.{field}"):
            hermes_manager(engine, tokenizer, [EchoTool("search")], **{field: value})
