"""The sandbox's break-outs tried by a trainer that is an ordinary user (run as that user, by the test).

``python sandbox_as_user.py SETTINGS_JSON`` (settings: ``socket``, a unix socket listening under
``/run``; ``levels``, the isolation levels to try) runs, at each level, the classes of break-out
the sandbox issue lists, with the trainer's own uid and home (``$HOME``, a ``.netrc`` of mode 0600
in it), and prints one JSON object: per level, what each attempt saw. The test reads it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile

from agentrl.tools.sandbox.isolation import SandboxUnavailable, probe
from agentrl.tools.sandbox.tool import PythonSandboxTool

SYSCALL = (
    "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "def call(nr, *args):\n    result = libc.syscall(nr, *args)\n"
    "    return 'ok' if result >= 0 else os.strerror(ctypes.get_errno())\n"
)
FORGE = (
    "import json, os, stat, struct, sys\nframe, nonce = sys._getframe(), None\n"
    "while frame is not None:\n    request = frame.f_locals.get('request')\n"
    "    if isinstance(request, dict) and 'nonce' in request:\n        nonce = request['nonce']\n"
    "    frame = frame.f_back\n"
    "body = json.dumps({'output': 'x', 'output_bytes': 'many', 'nonce': nonce}).encode()\n"
    "for fd in range(3, 64):\n    try:\n        if stat.S_ISFIFO(os.fstat(fd).st_mode):\n"
    "            os.write(fd, struct.pack('>Q', len(body)) + body)\n    except OSError:\n        pass\n"
)


def read_attempt(path: str) -> str:
    return f"try:\n    print(open({path!r}).read()[:6])\nexcept OSError as e:\n    print(type(e).__name__)"


async def texts(tool: PythonSandboxTool, *codes: str) -> list[str]:
    session = await tool.open_session()
    try:
        return [(await session.call({"code": code})).text for code in codes]
    finally:
        await session.close()


def attempts(level: str, settings: dict) -> dict[str, object]:
    work_root = tempfile.mkdtemp()
    tool = PythonSandboxTool(isolation=level, work_root=work_root, max_interpreters=1)
    netrc = os.path.join(os.environ["HOME"], ".netrc")
    connect = (
        f"import socket\ntry:\n    s = socket.socket(socket.AF_UNIX)\n    s.connect({settings['socket']!r})\n"
        "    print('connected')\nexcept OSError as e:\n    print(type(e).__name__)"
    )
    keyring = SYSCALL + "print(call(248, b'user', b'agentrl-k', b'secret', 6, -4))"
    read_key = SYSCALL + "print(call(249, b'user', b'agentrl-k', None, -4))"
    memfd = "import os\ntry:\n    os.memfd_create('x')\nexcept OSError as e:\n    print(e.errno)"
    seen: dict[str, object] = {
        "uid": asyncio.run(texts(tool, "import os; print(os.getuid())"))[0],
        "files": asyncio.run(texts(tool, read_attempt(netrc), read_attempt(settings["project_file"]))),
        "socket": asyncio.run(texts(tool, connect))[0],
        "keyring": asyncio.run(texts(tool, keyring)) + asyncio.run(texts(tool, read_key)),
        "memfd": asyncio.run(texts(tool, memfd))[0],
        "forged": asyncio.run(texts(tool, FORGE + "print('after')", "print('second')")),
        "memory": tool.describe().partition("a process, ")[2].split(", ")[0],
    }
    try:
        PythonSandboxTool(isolation=level, work_root=work_root, memory_cgroup="require")
        seen["require"] = "started"
    except (SandboxUnavailable, ValueError) as exc:  # refused: the message says why
        seen["require"] = str(exc)
    return seen


def main() -> None:
    settings = json.loads(sys.argv[1])
    report = {}
    for level in settings["levels"]:
        reason = probe(level)
        report[level] = {"unavailable": reason} if reason else attempts(level, settings)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
