"""The policy's Python in a sandboxed interpreter of its own per trajectory (``PythonSandboxTool``)."""

from agentrl.tools.sandbox.tool import PythonSandboxTool

__all__ = ["PythonSandboxTool"]
