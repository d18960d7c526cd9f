"""Pure parts of the rollout: action parsing, observation truncation, calculator, registry."""

from __future__ import annotations

import asyncio

import pytest

from agentrl.agent.actions import parse_action
from agentrl.agent.formats import ToolMessage, build_format
from agentrl.agent.observations import FINAL_TURN_NOTE, OBS_SUFFIX, ObservationEncoder, encode_text
from agentrl.config.schema import RolloutConfig, ToolConfig
from agentrl.tools.calculator import CalculationError, CalculatorTool, evaluate
from agentrl.tools.registry import build_tool, build_tools
from agentrl.tools.retrieval.search import SearchTool, format_documents
from agentrl.tools.typed import as_typed


@pytest.mark.parametrize(
    ("text", "kind", "tag", "content"),
    [
        ("<think>x</think><search> capital of France </search>", "tool", "search", "capital of France"),
        ("<think>x</think> <answer> Paris </answer>", "answer", "answer", "Paris"),
        ("<calculate>2+2</calculate>", "tool", "calculate", "2+2"),
        ("I do not know<|im_end|>", "invalid", None, ""),
        ("<search>   </search>", "invalid", "search", ""),
        ("query </search>", "invalid", "search", ""),
        ("<weather> Paris </weather>", "invalid", None, ""),  # unregistered tool
        ("<search>a</search> then <answer>b</answer>", "tool", "search", "a"),  # first closing tag wins
    ],
)
def test_parse_action(text, kind, tag, content):
    action = parse_action(text, ["search", "calculate"])
    assert (action.kind, action.tag, action.content) == (kind, tag, content)
    assert (action.reason is None) == (kind != "invalid")


def test_final_turn_ignores_tool_tags():
    assert parse_action("<search> q </search>", []).kind == "invalid"


SEARCH_SPEC = as_typed(SearchTool("http://x")).spec


def tool_format(name: str, tokenizer):
    """The rollout's format of that name for the search tool (hermes: the project's template)."""
    fields = {"tool_format": "hermes", "chat_template": "hermes"} if name == "hermes" else {}
    return build_format(RolloutConfig(**fields), tokenizer, [SEARCH_SPEC])


@pytest.mark.parametrize("format_name", ["tags", "hermes"])
def test_observation_truncation_keeps_closing_tag(tokenizer, format_name):
    """Cut to ``max_obs_length``, an observation keeps its closing (tags: ``</information>``;
    hermes: the tool turn's end and the next assistant header) and the final-turn note."""
    fmt = tool_format(format_name, tokenizer)

    def encode(text: str, final_turn: bool = False):
        message = [ToolMessage("search", text)]
        return fmt.observation(message, turn_closed=True, final_turn=final_turn, max_obs_length=80)

    closing = (
        "</information>\n\n"
        if format_name == "tags"
        else "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    short = encode("Doc 1(Title: x) short")
    assert short.tokens_cut == 0
    short_text = tokenizer.decode(short.ids, skip_special_tokens=False)
    if format_name == "tags":
        assert short_text == "\n\n<information>Doc 1(Title: x) short</information>\n\n"
        assert short == ObservationEncoder(tokenizer, max_obs_length=80).encode("Doc 1(Title: x) short")
    else:
        assert short_text == f"\n<|im_start|>tool\n<tool_response>\nDoc 1(Title: x) short{closing}"

    long_text = "many words here " * 50
    obs = encode(long_text)
    if format_name == "tags":  # exactly the budget, the inner tokens cut
        assert len(obs.ids) == 80
        assert obs.tokens_cut == len(encode_text(tokenizer, long_text)) - (
            80 - len(encode_text(tokenizer, "\n\n<information>")) - len(encode_text(tokenizer, OBS_SUFFIX))
        )
    else:  # the content cut and the template rendered around it again: within the budget
        assert 60 < len(obs.ids) <= 80 and obs.tokens_cut > 0
    assert tokenizer.decode(obs.ids, skip_special_tokens=False).endswith(closing)

    final = encode(long_text, final_turn=True)
    assert len(final.ids) <= 80 and tokenizer.decode(final.ids, skip_special_tokens=False).endswith(
        FINAL_TURN_NOTE + closing
    )


def test_observation_budget_too_small_is_rejected(tokenizer):
    with pytest.raises(ValueError, match="max_obs_length"):
        ObservationEncoder(tokenizer, max_obs_length=5)


def test_format_documents():
    text = format_documents([{"contents": '"Paris"\nParis is in France.'}, {"contents": '"Rome"\nRome.'}])
    assert text == 'Doc 1(Title: "Paris") Paris is in France.\nDoc 2(Title: "Rome") Rome.'


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("3 * (4 + 5)", 27),
        ("2 ** 10", 1024),
        ("7 / 2", 3.5),
        ("-3 + +4", 1),
        ("17 // 5", 3),
        ("17 % 5", 2),
        ("0.1+0.2", 0.1 + 0.2),
    ],
)
def test_calculator_values(expr, value):
    assert evaluate(expr) == value


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("__import__('os').system('true')", "unsupported"),
        ("x + 1", "unsupported syntax: Name"),
        ("(1).real", "unsupported syntax: Attribute"),
        ("[1, 2][0]", "unsupported"),
        ("'a' * 3", "unsupported literal"),
        ("9 ** 9 ** 9", "exponent"),
        ("1 / 0", "division by zero"),
        ("10 ** 99 * 10 ** 99", "exceeds"),
        ("1 +", "not an arithmetic expression"),
        ("True + 1", "unsupported literal"),
    ],
)
def test_calculator_rejects_unsafe_or_bad(expr, why):
    with pytest.raises(CalculationError, match=why):
        evaluate(expr)


def test_calculator_tool_reports_errors_as_text():
    results = asyncio.run(CalculatorTool().execute(["3 * (4 + 5)", "open('x')"]))
    assert results[0].text == "27" and results[0].metrics["calc_errors"] == 0
    assert results[1].text.startswith("Error:") and results[1].metrics["calc_errors"] == 1


def test_registry_builds_by_dotted_and_colon_path():
    calc = build_tool(ToolConfig("agentrl.tools.calculator.CalculatorTool", {"max_exponent": 5}))
    assert isinstance(calc, CalculatorTool) and calc.max_exponent == 5 and calc.tag == "calculate"
    search = build_tool(
        {"class_path": "agentrl.tools.retrieval.search:SearchTool", "options": {"url": "http://x", "topk": 2}}
    )
    assert isinstance(search, SearchTool) and search.topk == 2
    tools = build_tools([ToolConfig(), ToolConfig("agentrl.tools.calculator.CalculatorTool")])
    assert sorted(tools) == ["calculate", "search"]


def test_registry_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"CalculatorTool.*unknown option\(s\) \['max_exp'\]"):
        build_tool(ToolConfig("agentrl.tools.calculator.CalculatorTool", {"max_exp": 5}))
    with pytest.raises(ImportError, match="'no_such_module.Tool': cannot import module 'no_such_module'"):
        build_tool(ToolConfig("no_such_module.Tool"))
    with pytest.raises(ImportError, match="module 'agentrl.tools.calculator' has no attribute 'Nope'"):
        build_tool(ToolConfig("agentrl.tools.calculator.Nope"))
    with pytest.raises(ValueError, match="topk must be >= 1"):
        build_tool(ToolConfig("agentrl.tools.retrieval.SearchTool", {"topk": 0}))
    with pytest.raises(ValueError, match="both use tag <calculate>"):
        build_tools([ToolConfig("agentrl.tools.calculator.CalculatorTool")] * 2)
    with pytest.raises(ValueError, match="reserved"):
        build_tool(ToolConfig("agentrl.tools.calculator.CalculatorTool", {"tag": "answer"}))
    with pytest.raises(TypeError, match="OrderedDict has no 'name'"):
        build_tool(ToolConfig("collections.OrderedDict"))


@pytest.mark.parametrize("format_name", ["tags", "hermes"])
def test_messages_are_encoded_through_the_chat_template_or_as_plain_text(tokenizer, format_name):
    from agentrl.agent.prompts import encode_messages
    from agentrl.data.qa import make_prompt

    messages = [{"role": "user", "content": make_prompt("What is the capital of France?")}]
    ids = tool_format(format_name, tokenizer).prompt_ids(messages, [SEARCH_SPEC])
    text = tokenizer.decode(ids, skip_special_tokens=False)
    if format_name == "tags":  # the data's own encoding, no tools rendered
        assert ids == encode_messages(tokenizer, messages)
        assert text.startswith("<|im_start|>user\nAnswer the question below.")
    else:  # the tools' schemas in the system turn, then the user's
        assert text.startswith("<|im_start|>system\n") and '"name": "search"' in text
        assert "<|im_end|>\n<|im_start|>user\nAnswer the question below." in text
    assert text.endswith("<|im_start|>assistant\n")
    assert "Question: What is the capital of France?" in text
    raw = encode_messages(tokenizer, [{"role": "user", "content": "Q: Why?"}], chat=False)
    assert tokenizer.decode(raw, skip_special_tokens=True) == "Q: Why?"
    with pytest.raises(ValueError, match="non-empty list"):
        encode_messages(tokenizer, [])
