"""An evaluation's settings, one value: decoding, budgets and retrieval, recorded beside the numbers.

``EvalSettings`` holds a training config's rollout section whole (turns, tokens a turn,
observation length, schedule, sampling) and the evaluation's own fields (``topk``, budgets,
batch size, answer rule); :meth:`EvalSettings.from_experiment` makes the settings that evaluate
what a config trains. ``search_tool_options`` reads the options of a rollout's search tool.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, replace
from typing import Any

from agentrl.agent.sampling import rollout_sampling
from agentrl.config.schema import DataConfig, ExperimentConfig, RolloutConfig
from agentrl.engines import SamplingParams
from agentrl.eval.backends import is_search_tool
from agentrl.eval.extraction import check_answer_rule

__all__ = ["EvalSettings", "search_tool_options"]


def search_tool_options(rollout: RolloutConfig) -> dict[str, Any] | None:
    """The options (``url``, ``topk``, ...) of the first search tool in ``rollout.tools`` (``SearchTool``
    or a subclass: ``backends.is_search_tool``); None without one."""
    for tool in rollout.tools:
        if is_search_tool(tool):
            return dict(tool.options)
    return None


def _from_rollout(name: str) -> Any:
    """A read-only view of ``rollout.<name>``: the value is declared once, in ``RolloutConfig``."""
    return property(lambda self: getattr(self.rollout, name), doc=f"``rollout.{name}``")


@dataclass(frozen=True)
class EvalSettings:
    """Decoding, budgets and retrieval of an evaluation (recorded beside the numbers).

    ``rollout`` is a training config's rollout section, whole: turns, tokens a turn,
    observation length, schedule, temperature / top-p / top-k (readable here by those names
    too). The other fields are the evaluation's own. :meth:`from_experiment` makes the
    settings that evaluate what a config trains, and :meth:`with_overrides` changes fields
    of either kind by name. The defaults are the default experiment's:
    ``EvalSettings() == EvalSettings.from_experiment(ExperimentConfig())``.

    Greedy by default, as the trainer's validation and the Search-R1 evaluation.
    ``max_tokens_per_turn`` caps each generation; ``max_response_length`` caps all turns
    plus observations of one answer. ``batch_size`` questions are rolled out (and written to
    disk) at a time. ``answer_rule`` (one of ``extraction.ANSWER_RULES``) picks what a record
    scores: the accepted ``<answer>`` tag only (``tag``) or, failing one, a short answer
    read from the last model turn (``tag-or-first-line``, the fair baseline protocol).
    """

    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    topk: int = 3  # the search tool's default
    greedy: bool = True
    seed: int = 0
    max_prompt_length: int = DataConfig.max_prompt_length
    max_response_length: int = DataConfig.max_response_length
    batch_size: int = DataConfig.val_batch_size
    retriever_timeout_s: float = 30.0
    answer_rule: str = "tag"

    max_turns = _from_rollout("max_turns")
    max_tokens_per_turn = _from_rollout("max_tokens_per_turn")
    max_obs_length = _from_rollout("max_obs_length")
    schedule = _from_rollout("schedule")
    temperature = _from_rollout("temperature")
    top_p = _from_rollout("top_p")
    top_k = _from_rollout("top_k")

    def __post_init__(self) -> None:
        if not isinstance(self.rollout, RolloutConfig):
            raise TypeError(
                f"EvalSettings.rollout must be a RolloutConfig, got {type(self.rollout).__name__}"
            )
        check_answer_rule(self.answer_rule, "EvalSettings.answer_rule")
        for name in ("topk", "max_tokens_per_turn", "max_prompt_length", "max_response_length", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"EvalSettings.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_turns < 0:
            raise ValueError(f"EvalSettings.max_turns must be >= 0, got {self.max_turns}")
        if not self.greedy and self.temperature <= 0:
            raise ValueError(f"EvalSettings.temperature must be > 0 when sampling, got {self.temperature}")

    @classmethod
    def from_experiment(cls, cfg: ExperimentConfig, **overrides: Any) -> EvalSettings:
        """The evaluation of what ``cfg`` trains, then ``overrides`` by field name (:meth:`with_overrides`).

        A copy of ``cfg.actor.rollout``; the data's prompt and response budgets; the
        validation's batch size and decoding (``rollout.val_greedy``); the experiment's seed;
        the ``topk`` and ``timeout_s`` of its search tool where its options set them.
        """
        rollout = copy.deepcopy(cfg.actor.rollout)
        search = search_tool_options(rollout) or {}
        tool = {"topk": int(search["topk"])} if "topk" in search else {}
        if "timeout_s" in search:
            tool["retriever_timeout_s"] = float(search["timeout_s"])
        settings = cls(
            rollout=rollout,
            greedy=rollout.val_greedy,
            seed=cfg.seed,
            max_prompt_length=cfg.data.max_prompt_length,
            max_response_length=cfg.data.max_response_length,
            batch_size=cfg.data.val_batch_size,
            **tool,
        )
        return settings.with_overrides(**overrides)

    def with_overrides(self, **changes: Any) -> EvalSettings:
        """These settings with ``changes``, each naming a field of the evaluation's or of ``rollout``'s."""
        own = {f.name for f in fields(self)}
        of_rollout = {f.name for f in fields(RolloutConfig)}
        unknown = sorted(set(changes) - own - of_rollout)
        if unknown:
            raise ValueError(
                f"EvalSettings: no field named {', '.join(map(repr, unknown))}; the evaluation's are "
                f"{sorted(own)} and the rollout's (RolloutConfig) {sorted(of_rollout)}"
            )
        mine = {k: v for k, v in changes.items() if k in own}
        rollout = replace(
            mine.pop("rollout", self.rollout), **{k: changes[k] for k in changes if k in of_rollout}
        )
        return replace(self, rollout=rollout, **mine)

    def sampling(self) -> SamplingParams:
        return rollout_sampling(self.rollout, greedy=self.greedy, seed=None if self.greedy else self.seed)

    def decoding(self) -> dict[str, Any]:
        if self.greedy:
            return {"greedy": True, "max_tokens_per_turn": self.max_tokens_per_turn}
        return {
            "greedy": False,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "seed": self.seed,
            "max_tokens_per_turn": self.max_tokens_per_turn,
        }
