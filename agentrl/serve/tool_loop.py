"""One chat request answered by the whole agent loop on the server: the model's tool calls run here.

``ToolLoop.reply`` renders the request's messages as the prompt, rolls it out with the run's
tools (``LLMGenerationManager``: the loop training used, at the request's sampling, ``n``
samples), and answers each sample as an assistant message whose ``content`` is the last turn's
text, with two fields beside the API's: ``answer`` (the body of its ``<answer>``, or None) and
``tool_calls_made`` (every call of every turn: turn, name, arguments, status, what the tool
returned as the model read it).
"""

from __future__ import annotations

from typing import Any

from agentrl.agent import LLMGenerationManager, PromptSpec
from agentrl.agent.trajectory import Segment, Trajectory
from agentrl.endpoint.messages import normalise
from agentrl.endpoint.server import ChatEndpoint
from agentrl.endpoint.wire import ChatRequest, completion


class ToolLoop:
    """Answers requests outside an episode with the built-in loop and the run's tools."""

    def __init__(self, manager: LLMGenerationManager) -> None:
        self.manager = manager

    async def reply(self, endpoint: ChatEndpoint, chat: ChatRequest) -> dict[str, Any]:
        """Every sample of the request rolled out to its end (module docstring)."""
        endpoint.check_tools(chat)
        messages = normalise(chat.messages)
        prompt = PromptSpec(self.manager.format.prompt_ids(messages, self.manager.specs), messages=messages)
        budget = endpoint.budget
        sampling = endpoint.sampling_for(chat, budget.max_response_length, episode=False)
        result = await self.manager.arun([prompt], sampling, n=chat.n)
        choices = [self._choice(endpoint, k, t) for k, t in enumerate(result.trajectories)]
        body = completion(endpoint.model, len(prompt.prompt_ids), [], endpoint.tokenizer, False)
        body["choices"] = choices
        sampled = sum(t.num_model_tokens for t in result.trajectories)
        body["usage"] |= {
            "completion_tokens": sampled,
            "total_tokens": body["usage"]["prompt_tokens"] + sampled,
        }
        return body

    @staticmethod
    def _choice(endpoint: ChatEndpoint, index: int, t: Trajectory) -> dict[str, Any]:
        last = max(
            (span for span in t.segment_spans if span[0] == Segment.MODEL), key=lambda s: s[1], default=None
        )
        ids = t.response_ids[last[1] : last[2]] if last is not None else []
        text = endpoint.tokenizer.decode(ids, skip_special_tokens=True)
        calls = [
            {
                "turn": c.turn,
                "name": c.name,
                "arguments": c.arguments,
                "status": c.status,
                "result": c.message,
            }
            for c in t.calls
        ]
        cut = t.truncation.context or t.truncation.response_budget
        return {
            "index": index,
            "message": {"role": "assistant", "content": text, "answer": t.answer, "tool_calls_made": calls},
            "finish_reason": "length" if cut and not t.finished else "stop",
            "logprobs": None,
        }
