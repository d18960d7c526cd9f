"""Token drift: how far a decode → encode round trip of a response is from the sampled ids.

Real BPE tokenizers can merge differently across a model/observation boundary, so a
pipeline that re-tokenized rendered text would train on ids the policy never sampled. The
rollout never does that; drift is measured (``check_token_drift``) to show what it avoids.
"""

from __future__ import annotations

import difflib
from typing import Any

from agentrl.agent.observations import encode_text


def token_drift(tokenizer: Any, ids: list[int]) -> int:
    """How many of ``ids`` a decode → encode round trip does not reproduce (a metric, not an error)."""
    if not ids:
        return 0
    again = encode_text(tokenizer, tokenizer.decode(ids, skip_special_tokens=False))
    matcher = difflib.SequenceMatcher(a=ids, b=again, autojunk=False)
    matched = sum(block.size for block in matcher.get_matching_blocks())
    return max(len(ids), len(again)) - matched
