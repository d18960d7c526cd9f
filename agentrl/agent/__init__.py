"""Multi-turn agent rollouts: the generation manager, trajectories, tools, prompts, dumps."""

from agentrl.agent.collate import collate, render_response
from agentrl.agent.drift import token_drift
from agentrl.agent.generation import LLMGenerationManager, RolloutResult
from agentrl.agent.rollout_metrics import rollout_metrics
from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory, Truncation
from agentrl.config.moved import install_module_aliases

# The tools lived in agentrl.agent.tools before agentrl/tools/: users' tool modules written then
# import from there, and still may (with a FutureWarning naming the new module).
install_module_aliases()

__all__ = [
    "LLMGenerationManager",
    "PromptSpec",
    "RolloutResult",
    "Segment",
    "Trajectory",
    "Truncation",
    "collate",
    "render_response",
    "rollout_metrics",
    "token_drift",
]
