"""A tag tool for tests: ``<tag> text </tag>`` calls answered one by one, every batch it got kept."""

from __future__ import annotations

from agentrl.tools.base import ToolResult


class RecordingTagTool:
    """A tag tool named ``name`` on ``tag``; ``answer`` (async) gives each call's result, and
    ``batches`` holds the calls of every ``execute`` in order."""

    def __init__(self, name: str, tag: str, timeout_s: float = 1.0) -> None:
        self.name, self.tag, self.timeout_s = name, tag, timeout_s
        self.batches: list[list[str]] = []

    async def answer(self, call: str) -> ToolResult:
        return ToolResult(f"{self.name} {call}")

    async def execute(self, calls: list[str]) -> list[ToolResult]:
        self.batches.append(list(calls))
        return [await self.answer(call) for call in calls]
