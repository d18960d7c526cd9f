"""Tools over the retriever service: ``SearchTool`` (``/retrieve``), ``PageReaderTool`` (``/open_page``)."""

from agentrl.tools.retrieval.page_reader import PageReaderTool
from agentrl.tools.retrieval.search import SearchTool

__all__ = ["PageReaderTool", "SearchTool"]
