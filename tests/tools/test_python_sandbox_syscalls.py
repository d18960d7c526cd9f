"""The sandbox's system-call filter: what the kernel would otherwise share with or grow for the policy's
code is refused (keyrings, tracing, BPF, perf, userfaultfd, mounts, namespaces, io_uring, uncounted
memory), and what ordinary code does still works, at every isolation level here."""

from __future__ import annotations

import json
import os

import pytest

from tests.tools.test_python_sandbox import (
    LEVELS,
    NAMESPACE_LEVELS,
    make,
    run_session,
    sandbox_key_counts,
)
from tests.tools.test_python_sandbox import work_root as work_root  # the fixture, under its own name

SYSCALL = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    result = libc.syscall(nr, *args)
    return "ok" if result >= 0 else os.strerror(ctypes.get_errno())
"""
KEY_SPEC_USER_KEYRING = -4
# the filter's numbers are x86-64's: elsewhere the interpreter installs none (docs/python_sandbox.md)
pytestmark = pytest.mark.skipif(os.uname().machine != "x86_64", reason="the system-call filter is x86-64's")


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
def test_no_key_is_stored_in_a_kernel_keyring_for_a_later_session_of_the_same_uid(level, work_root):
    tool = make(level, work_root, max_interpreters=1)  # one uid, handed to each session in turn
    store = SYSCALL + f'print(call(248, b"user", b"agentrl-k", b"secret", 6, {KEY_SPEC_USER_KEYRING}))'
    read = SYSCALL + f'print(call(249, b"user", b"agentrl-k", None, {KEY_SPEC_USER_KEYRING}))'
    keys = sandbox_key_counts()
    (stored,) = run_session(tool, store)
    (found,) = run_session(tool, read)
    assert stored == "Operation not permitted" and found == "Operation not permitted"
    assert sandbox_key_counts() == keys  # as the host's kernel sees it, not only as the code says


REFUSED = {
    "ptrace": "call(101, 0, 0, 0, 0)",  # PTRACE_TRACEME
    "bpf": "call(321, 0, 0, 0)",
    "perf_event_open": "call(298, 0, 0, -1, -1, 0)",
    "userfaultfd": "call(323, 0)",
    "mount": 'call(165, b"none", b"/tmp", b"tmpfs", 0, None)',
    "unshare_user": "call(272, 0x10000000)",
    "clone_new_user": "call(56, 0x10000000 | 17, 0, 0, 0, 0)",  # CLONE_NEWUSER | SIGCHLD
    "setns": "call(308, 0, 0)",
    "io_uring_setup": "call(425, 1, ctypes.create_string_buffer(120))",
    "keyctl": "call(250, 0, -4, 0, 0, 0)",
    "shmget": "call(29, 0, 1 << 20, 0o1600)",
    "process_vm_readv": "call(310, 1, 0, 0, 0, 0, 0)",
}


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
def test_tracing_bpf_perf_mounts_new_namespaces_io_uring_and_shared_memory_are_refused(level, work_root):
    code = SYSCALL + "print(json.dumps({" + ", ".join(f"{k!r}: {v}" for k, v in REFUSED.items()) + "}))"
    (out,) = run_session(make(level, work_root), code)
    assert json.loads(out) == dict.fromkeys(REFUSED, "Operation not permitted")


@pytest.mark.parametrize("level", LEVELS)
def test_memory_in_a_memfd_which_no_limit_counts_is_refused(level, work_root):
    (out,) = run_session(
        make(level, work_root),
        'import os\ntry:\n    os.memfd_create("x")\nexcept OSError as e:\n    print(e.errno)',
    )
    assert out == "1"  # EPERM


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
def test_subprocesses_threads_and_fork_still_work_under_the_filter(level, work_root):
    code = (
        "import os, subprocess, threading\n"
        "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
        "print(subprocess.run(['echo', 'child'], capture_output=True, text=True).stdout.strip())\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    os._exit(7)\n"
        "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))"
    )
    (out,) = run_session(make(level, work_root), code)
    assert out.split() == ["thread", "child", "7"]
