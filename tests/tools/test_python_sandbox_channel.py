"""The sandbox's reply channel: code that writes its own frames to it cannot make the host raise, pass
the output cap, or shift a later call's reply (issue: forged replies), at every isolation level here."""

from __future__ import annotations

import pytest

from agentrl.tools.sandbox.process import checked_reply
from tests.tools.test_python_sandbox import LEVELS, assert_nothing_left, descendants, make, run_results
from tests.tools.test_python_sandbox import work_root as work_root  # the fixture, under its own name

# The attacker's helper: it finds the call's nonce in the interpreter's own frames (the code runs in
# that process) and writes a frame to every pipe it may write to, the reply channel among them.
FORGE = """
import json, os, stat, struct, sys

def forge(message):
    frame, nonce = sys._getframe(), None
    while frame is not None:
        request = frame.f_locals.get("request")
        if isinstance(request, dict) and "nonce" in request:
            nonce = request["nonce"]
        frame = frame.f_back
    body = json.dumps({**message, "nonce": nonce}).encode()
    sent = 0
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, struct.pack(">Q", len(body)) + body)
                sent += 1
        except OSError:
            pass
    return sent
"""

CAP = 2000


@pytest.mark.parametrize("level", LEVELS)
def test_a_forged_reply_of_the_wrong_types_ends_the_session_with_a_message_and_never_raises(level, work_root):
    before = descendants()
    forged = FORGE + 'forge({"output": "x" * 900_000, "output_bytes": "many", "value": None})'
    first, second = run_results(make(level, work_root, max_output_bytes=CAP), forged, 'print("second")')
    assert "output_bytes is not a count" in first.text and len(first.text) < CAP
    assert "A new Python interpreter was started" in second.text and second.text.endswith("second")
    assert_nothing_left(before)


@pytest.mark.parametrize("level", LEVELS)
def test_a_well_formed_forged_reply_stays_under_the_cap_and_never_answers_the_next_call(level, work_root):
    forged = FORGE + 'print("genuine"); forge({"output": "f" * 900_000, "output_bytes": 5})'
    first, second, third = run_results(
        make(level, work_root, max_output_bytes=CAP), forged, 'print("second")', 'print("third")'
    )
    # the forged frame may be read as the first call's reply (its own message, the code's to choose),
    # cut to the cap; the genuine reply that follows it is never taken for a later call's
    assert len(first.text) <= CAP + 200
    assert "genuine" not in second.text and "f" * 100 not in second.text
    assert second.text.endswith("second") or "the reply channel" in second.text or "answer" in second.text
    assert third.text.endswith("third")


def test_checked_reply_takes_a_genuine_reply_unchanged_and_refuses_each_malformed_field():
    genuine = {"output": "é" * 10, "output_bytes": 20, "value": "v" * 11, "error": None, "limit": None}
    assert checked_reply({**genuine, "nonce": "n1"}, "n1", 10) == genuine  # value: 10 chars and "…"
    long = checked_reply({**genuine, "value": "v" * 50, "nonce": "n1"}, "n1", 10)
    assert long["value"] == "v" * 10 + "…"
    for bad, needle in (
        ({**genuine, "nonce": "n0"}, "does not answer this call"),
        ({**genuine, "nonce": "n1", "output_bytes": True}, "output_bytes is not a count"),
        ({**genuine, "nonce": "n1", "output_bytes": -1}, "output_bytes is not a count"),
        ({**genuine, "nonce": "n1", "error": ["x"]}, "error is not text"),
        ({**genuine, "nonce": "n1", "output": 3}, "output is not text"),
    ):
        with pytest.raises(ValueError, match=needle):
            checked_reply(bad, "n1", 10)
