"""Web search over a paid API (Serper), with rate limits, retries, costs and a shared cache."""

from agentrl.tools.web.search import WebSearchTool

__all__ = ["WebSearchTool"]
