"""The web-search tool's options, ``WebSearchOptions``: one frozen value, validated once, when it is made.

The config stays flat (``actor.rollout.tools[i].options`` is a mapping of these names, passed to
``WebSearchTool`` as keyword arguments); the tool names this class as its ``options_class``, so
the registry and the driver's check refuse an unknown name with a did-you-mean. Each bad value
is refused here, naming the option and what was expected (``rules.check_option_types`` for the
types); the key's variable name is checked without echoing it (a user may have pasted the key).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from agentrl.tools.http import RetryPolicy
from agentrl.tools.rules import check_option_types
from agentrl.tools.web.client import SERPER_URL

__all__ = ["DEFAULT_CACHE", "WebSearchOptions"]

DEFAULT_CACHE = "~/.cache/agentrl/web_search.sqlite3"
WHERE = "web search"
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


@dataclass(frozen=True)
class WebSearchOptions:
    """Every option of ``WebSearchTool`` with its default (docs/adding_a_tool.md, section 7).

    The tool's ``name`` and ``tag`` (default: the name); the API (``base_url``, ``api_key_env``,
    the variable holding the key); the results (``num`` by default, at most ``max_num``, ``num``
    a schema parameter unless ``num_argument`` is false; ``gl``/``hl``, country and language;
    ``max_chars`` of text; ``price_per_1k_usd`` for the cost counter); the rate limit
    (``requests_per_s``, None for none; ``burst``); the retries (``request_timeout_s`` per
    request, ``max_retries``, ``backoff_base_s``/``backoff_max_s``, ``deadline_s`` per call); the
    cache (``cache_path``, None for none; ``cache_ttl_s``, None for ever).
    """

    name: str = "web_search"
    tag: str | None = None
    # the API
    base_url: str = SERPER_URL
    api_key_env: str = "SERPER_API_KEY"
    # what the policy asks and reads, and what it costs
    num: int = 5
    max_num: int = 10
    num_argument: bool = True
    gl: str | None = None
    hl: str | None = None
    max_chars: int = 2000
    price_per_1k_usd: float = 1.0
    # the rate limit, per process
    burst: int = 1
    requests_per_s: float | None = 10.0
    # one search's retries (a RetryPolicy)
    request_timeout_s: float = 10.0
    max_retries: int = 3
    backoff_base_s: float = 0.5
    backoff_max_s: float = 8.0
    deadline_s: float = 60.0
    # the cache
    cache_path: str | None = DEFAULT_CACHE
    cache_ttl_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.api_key_env, str) or not _ENV_NAME.fullmatch(self.api_key_env):
            # The value is not echoed: a user may have pasted the key itself here.
            raise ValueError(
                "api_key_env must name an environment variable (capitals, digits, '_', e.g. SERPER_API_KEY), "
                "not hold the key itself"
            )
        if isinstance(self.cache_path, os.PathLike):  # a pathlib.Path from Python code
            object.__setattr__(self, "cache_path", os.fspath(self.cache_path))
        check_option_types(self, WHERE)
        base, top, rate, ttl = self.backoff_base_s, self.backoff_max_s, self.requests_per_s, self.cache_ttl_s
        _require(
            1 <= self.num <= self.max_num,
            f"need 1 <= num <= max_num, got num={self.num}, max_num={self.max_num}",
        )
        _require(self.max_chars >= 100, f"max_chars must be >= 100, got {self.max_chars}")
        _require(ttl is None or ttl > 0, f"cache_ttl_s must be > 0 or null, got {ttl}")
        _require(rate is None or rate > 0, f"requests_per_s must be > 0 or null, got {rate}")
        _require(self.burst >= 1, f"burst must be >= 1, got {self.burst}")
        _require(
            self.request_timeout_s > 0 and self.deadline_s > 0,
            f"request_timeout_s/deadline_s must be > 0, got {self.request_timeout_s}/{self.deadline_s}",
        )
        _require(self.max_retries >= 0, f"max_retries must be >= 0, got {self.max_retries}")
        _require(0 <= base <= top, f"backoff: need 0 <= base <= max, got {base}/{top}")
        _require(self.price_per_1k_usd >= 0, f"price_per_1k_usd must be >= 0, got {self.price_per_1k_usd}")

    @property
    def retry(self) -> RetryPolicy:
        """One search's retries: ``max_retries + 1`` attempts, a ``Retry-After`` honoured in full."""
        return RetryPolicy(
            timeout_s=self.request_timeout_s,
            deadline_s=self.deadline_s,
            max_attempts=self.max_retries + 1,
            backoff_base_s=self.backoff_base_s,
            backoff_max_s=self.backoff_max_s,
        )

    @property
    def params(self) -> dict[str, str]:
        """The request body's extra fields (``gl``, ``hl``) that are set."""
        return {key: value for key, value in (("gl", self.gl), ("hl", self.hl)) if value is not None}


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(f"{WHERE}: {message}")
