"""Tools with many options take them as one frozen options dataclass, from a flat config.

``PythonSandboxTool`` (``SandboxOptions``) and ``WebSearchTool`` (``WebSearchOptions``) take
keyword arguments, as ``actor.rollout.tools[i].options`` gives them; the registry and the driver's
check read the accepted names from the dataclass, so a typo is refused with the tool's path and a
did-you-mean, and a bad value with the option's name and what was expected, before anything is
started (no interpreter, no request).
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields
from pathlib import Path

import pytest

from agentrl.config.schema import ToolConfig
from agentrl.tools import build_tool
from agentrl.tools.check import ToolConfigError, check_tools
from agentrl.tools.rules import option_names
from agentrl.tools.sandbox.isolation import SandboxLimits
from agentrl.tools.sandbox.options import SandboxOptions
from agentrl.tools.sandbox.tool import PythonSandboxTool
from agentrl.tools.web.options import WebSearchOptions
from agentrl.tools.web.search import WebSearchTool

SANDBOX = "agentrl.tools.sandbox.PythonSandboxTool"
WEB = "agentrl.tools.web.WebSearchTool"


# --- the sandbox -------------------------------------------------------------------------------


def test_an_unknown_sandbox_option_is_refused_with_the_tools_path_and_the_closest_option():
    path = rf"tool '{SANDBOX}': unknown option\(s\) \['wall_time'\]: PythonSandboxTool takes no option "
    with pytest.raises(ValueError, match=path + r"'wall_time' \(did you mean 'wall_time_s'\?\)"):
        build_tool(ToolConfig(SANDBOX, {"wall_time": 5}))
    with pytest.raises(ToolConfigError, match=r"actor\.rollout\.tools\[0\] .*did you mean 'wall_time_s'"):
        check_tools([ToolConfig(SANDBOX, {"wall_time": 5})])
    with pytest.raises(ValueError, match=r"^python sandbox: unknown option.*did you mean 'max_interpreters'"):
        PythonSandboxTool(max_interpreter=4)


def test_a_bad_sandbox_value_is_refused_naming_the_option_and_what_was_expected():
    with pytest.raises(ValueError, match=rf"tool '{SANDBOX}': python sandbox: option 'memory_mb' must be an"):
        build_tool(ToolConfig(SANDBOX, {"memory_mb": "1GB"}))
    with pytest.raises(ValueError, match=r"option 'allow_unisolated' must be true or false, got 'yes'"):
        SandboxOptions(allow_unisolated="yes")  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"isolation must be 'auto' or one of .* got 'bwarp' \(did you mean 'bwrap'"
    ):
        SandboxOptions(isolation="bwarp")
    with pytest.raises(ValueError, match=r"processes must be >= 2"):  # the limits' own check
        SandboxOptions(processes=1)
    with pytest.raises(ValueError, match=r"python sandbox: wall_time_s must be a number > 0, got 0"):
        SandboxOptions(wall_time_s=0)
    with pytest.raises(ValueError, match=r"max_interpreters must be >= 1, got 0"):
        SandboxOptions(max_interpreters=0)
    with pytest.raises(ValueError, match=r"timeout_s must be > 0, got -1"):
        SandboxOptions(timeout_s=-1)


def test_the_sandbox_takes_every_field_of_its_options_and_nothing_else():
    names = option_names(PythonSandboxTool)
    assert names is not None and names.required == frozenset()
    assert names.accepted == {f.name for f in fields(SandboxOptions)}
    assert {f.name for f in fields(SandboxLimits)} < names.accepted


def test_sandbox_options_are_frozen_and_hand_the_interpreter_its_limits_alone():
    options = SandboxOptions(wall_time_s=3, memory_mb=256, work_root=Path("/tmp/x"), queue_timeout_s=0)
    assert options.limits == SandboxLimits(wall_time_s=3, memory_mb=256)
    assert options.work_root == "/tmp/x"  # a path from Python code, kept as the config's string
    assert options.tool_timeout_s == 0 + 20 + 3 + 10  # no wait, a start, a call, and slack
    assert SandboxOptions(timeout_s=7).tool_timeout_s == 7.0
    with pytest.raises(FrozenInstanceError):
        options.wall_time_s = 5  # type: ignore[misc]
    with pytest.raises(TypeError, match="not both"):
        PythonSandboxTool(options, wall_time_s=5)


# --- web search --------------------------------------------------------------------------------


def test_an_unknown_web_search_option_is_refused_with_the_closest_one_before_the_key_is_looked_for(
    monkeypatch,
):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)  # never reached: the option is checked first
    with pytest.raises(
        ValueError, match=r"WebSearchTool takes no option 'max_retry' \(did you mean 'max_retries'"
    ):
        build_tool(ToolConfig(WEB, {"max_retry": 5}))
    with pytest.raises(ValueError, match=r"^web search: unknown option\(s\) \['numm'\]"):
        WebSearchTool(numm=3)


def test_a_bad_web_search_value_is_refused_naming_the_option_and_what_was_expected():
    with pytest.raises(ValueError, match=r"web search: option 'num' must be an integer, got '5'"):
        WebSearchOptions(num="5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"option 'cache_ttl_s' must be a number or null, got 'forever'"):
        WebSearchOptions(cache_ttl_s="forever")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"web search: backoff: need 0 <= base <= max, got 2.0/1.0"):
        WebSearchOptions(backoff_base_s=2.0, backoff_max_s=1.0)
    with pytest.raises(ValueError, match=r"requests_per_s must be > 0 or null, got 0"):
        WebSearchOptions(requests_per_s=0)
    pasted = 1234567890  # a key where the variable's name belongs: refused, not echoed
    with pytest.raises(ValueError, match="not hold the key itself") as caught:
        WebSearchOptions(api_key_env=pasted)  # type: ignore[arg-type]
    assert str(pasted) not in str(caught.value)


def test_web_search_options_give_the_client_its_retry_policy_and_request_fields():
    options = WebSearchOptions(request_timeout_s=2, max_retries=0, deadline_s=9, gl="fr")
    retry = options.retry
    assert (retry.timeout_s, retry.deadline_s, retry.max_attempts, retry.max_retry_after_s) == (2, 9, 1, None)
    assert (retry.backoff_base_s, retry.backoff_max_s) == (0.5, 8.0)
    assert options.params == {"gl": "fr"}
    assert option_names(WebSearchTool).accepted == {f.name for f in fields(WebSearchOptions)}  # type: ignore[union-attr]
