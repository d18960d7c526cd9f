"""A command's error is one ``error:`` line on a line of its own, its traceback only under
``AGENTRL_DEBUG``."""

from __future__ import annotations

import io

import pytest
from tqdm import tqdm

from agentrl.config.errors import DEBUG_ENV, StartupError, debugging, print_error, report_error


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def drawn_bar(stream: io.StringIO, **options) -> tqdm:
    bar = tqdm(total=10, file=stream, mininterval=0, miniters=1, **options)
    bar.update(3)
    assert not stream.getvalue().endswith("\n"), "the bar is mid-line, as while a run steps"
    return bar


def test_the_error_line_starts_a_line_of_its_own_while_a_progress_bar_is_drawing():
    stream = io.StringIO()
    bar = drawn_bar(stream, desc="training")
    print_error("actor rank 1 was lost", stream)
    output = stream.getvalue()
    assert "error: actor rank 1 was lost" in output.split("\n")
    assert output.endswith("\nerror: actor rank 1 was lost\n"), "nothing is redrawn after it"
    assert bar not in tqdm._instances  # closed: not redrawn later, when it is collected at exit


def test_a_nested_bar_left_open_by_an_exception_does_not_share_the_error_line():
    stream = io.StringIO()
    with tqdm(total=4, file=stream, mininterval=0, desc="training") as outer:
        outer.update(1)
        inner = drawn_bar(stream, desc="validating", leave=False)  # left open, as when a step fails
    print_error("stopped", stream)
    assert stream.getvalue().endswith("\nerror: stopped\n")
    assert inner not in tqdm._instances


def test_on_a_terminal_the_line_a_bar_leaves_is_cleared_before_the_error():
    stream = Terminal()
    bar = drawn_bar(stream)
    print_error("stopped", stream)
    assert stream.getvalue().endswith("\r\x1b[Kerror: stopped\n")
    assert bar not in tqdm._instances


def test_without_a_bar_the_error_is_just_its_line():
    stream = io.StringIO()
    print_error("bad key", stream)
    assert stream.getvalue() == "error: bad key\n"


def chained() -> StartupError:
    try:
        try:
            raise ConnectionError("Failed to connect to GCS")
        except ConnectionError as cause:
            raise StartupError("could not join the Ray cluster at resources.ray_address=x:1") from cause
    except StartupError as error:
        return error


def test_the_traceback_and_its_causes_are_printed_only_with_agentrl_debug(monkeypatch):
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    quiet = io.StringIO()
    assert report_error(chained(), 2, stream=quiet) == 2
    assert quiet.getvalue() == "error: could not join the Ray cluster at resources.ray_address=x:1\n"

    monkeypatch.setenv(DEBUG_ENV, "1")
    loud = io.StringIO()
    assert report_error(chained(), 4, "training stopped: ", stream=loud) == 4
    text = loud.getvalue()
    assert text.count("Traceback (most recent call last):") == 2 and "Failed to connect to GCS" in text
    assert (
        text.splitlines()[-1]
        == "error: training stopped: could not join the Ray cluster at resources.ray_address=x:1"
    )


@pytest.mark.parametrize("value, on", [("1", True), ("yes", True), ("0", False), ("", False), ("off", False)])
def test_agentrl_debug_values(monkeypatch, value, on):
    monkeypatch.setenv(DEBUG_ENV, value)
    assert debugging() is on


def test_an_error_without_a_message_is_named_by_its_type():
    stream = io.StringIO()
    report_error(KeyError(), 2, stream=stream)
    assert stream.getvalue() == "error: KeyError\n"
