"""Evaluation harness: a model (or checkpoint) on QA datasets in direct / rag / agent mode.

``evaluate(...)`` is the core (the trainer's validation can call it with an in-memory
model); ``python -m agentrl.eval`` and ``train_scripts/evaluate.sh`` are its command line.
"""

from agentrl.eval.backends import EvalModel, resolve_model_dir
from agentrl.eval.datasets import DatasetSpec, EvalQuestion, load_questions
from agentrl.eval.extraction import ANSWER_RULES
from agentrl.eval.harness import evaluate
from agentrl.eval.prompts import MODES
from agentrl.eval.results import EvalResults
from agentrl.eval.settings import EvalSettings
from agentrl.eval.store import ResultsStore, SettingsMismatch

__all__ = [
    "ANSWER_RULES",
    "MODES",
    "DatasetSpec",
    "EvalModel",
    "EvalQuestion",
    "EvalResults",
    "EvalSettings",
    "ResultsStore",
    "SettingsMismatch",
    "evaluate",
    "load_questions",
    "resolve_model_dir",
]
