"""Rule-based rewards for search agents: answer matching, the format check, scorers, batch scoring.

Torch-free on purpose: the reward worker, evaluation scripts and tests import it cheaply.
"""

from agentrl.rewards.manager import RewardSettings, score_batch
from agentrl.rewards.match import (
    cover_exact_match,
    exact_match,
    f1_score,
    gold_in_documents,
    normalize_answer,
)
from agentrl.rewards.registry import load_scorer, register_scorer, registered_data_sources, resolve_scorer
from agentrl.rewards.scorers import (
    FormatScorer,
    FormatValues,
    MatchScorer,
    ScoreInput,
    ScoreOutput,
    Scorer,
    answer_metrics,
    format_score,
    metrics_of,
)
from agentrl.rewards.structure import FormatCheck, RolloutCalls, check_format
from agentrl.rewards.tags import DEFAULT_TOOL_TAGS, extract_answer, information_texts, parse_response

__all__ = [
    "DEFAULT_TOOL_TAGS",
    "FormatCheck",
    "FormatScorer",
    "FormatValues",
    "MatchScorer",
    "RewardSettings",
    "RolloutCalls",
    "ScoreInput",
    "ScoreOutput",
    "Scorer",
    "answer_metrics",
    "check_format",
    "cover_exact_match",
    "exact_match",
    "extract_answer",
    "f1_score",
    "format_score",
    "gold_in_documents",
    "information_texts",
    "load_scorer",
    "metrics_of",
    "normalize_answer",
    "parse_response",
    "register_scorer",
    "registered_data_sources",
    "resolve_scorer",
    "score_batch",
]
