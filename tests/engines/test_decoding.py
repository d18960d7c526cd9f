"""Stop-string matching and token selection, the pieces of the HF decoding loop."""

from __future__ import annotations

import pytest
import torch

from agentrl.engines.base import SamplingParams
from agentrl.engines.sampling import select_tokens, truncate_logits
from agentrl.engines.stopping import IncrementalDetokenizer, StopStringMatcher


def test_incremental_detokenizer_reassembles_multibyte_characters(tokenizer):
    text = "naïve 日本語 </search> 🙂 done"
    ids = tokenizer(text, add_special_tokens=False).input_ids
    detok = IncrementalDetokenizer(tokenizer)
    deltas = [detok.push(i) for i in ids]
    assert "".join(deltas) == text == detok.text
    assert not any("\ufffd" in d for d in deltas)
    assert len(ids) > len(text.split()), "multi-byte characters should span several byte tokens"


def test_stop_matcher_reports_the_token_completing_the_stop_string(tokenizer):
    ids = tokenizer(
        "<think> ok </think> <search> capital of 日本 </search> tail", add_special_tokens=False
    ).input_ids
    stop_tag = tokenizer.convert_tokens_to_ids("</search>")
    matcher = StopStringMatcher(tokenizer, ("</answer>", "</search>"))
    hits = [matcher.push(i) for i in ids]
    first = next(k for k, h in enumerate(hits) if h is not None)
    assert ids[first] == stop_tag and hits[first] == "</search>"
    # a stop string ending inside a multi-byte character completes on that character's last byte
    ids = tokenizer("abc 日本", add_special_tokens=False).input_ids
    matcher = StopStringMatcher(tokenizer, ("日",))
    hits = [matcher.push(i) for i in ids]
    first = next(k for k, h in enumerate(hits) if h is not None)
    assert tokenizer.decode(ids[: first + 1]).endswith("日")
    with pytest.raises(ValueError, match="non-empty"):
        StopStringMatcher(tokenizer, ("",))


def test_truncate_logits_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(truncate_logits(logits, top_k=2, top_p=1.0))
    assert kept.tolist() == [[True, True, False, False]]
    kept = torch.isfinite(truncate_logits(logits, top_k=0, top_p=0.7))  # 0.5 < 0.7, 0.8 crosses it
    assert kept.tolist() == [[True, True, False, False]]
    kept = torch.isfinite(truncate_logits(logits, top_k=0, top_p=0.1))  # first token always kept
    assert kept.tolist() == [[True, False, False, False]]


def test_select_tokens_log_prob_is_before_truncation():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    params = SamplingParams(max_new_tokens=1, temperature=1.0, top_k=1)
    tokens, lp = select_tokens(logits, params, [torch.Generator().manual_seed(0)])
    assert tokens.tolist() == [0]
    assert lp.item() == pytest.approx(torch.log(torch.tensor(0.5)).item(), abs=1e-6)
    with pytest.raises(ValueError, match="one generator per row"):
        select_tokens(logits, params, [])
