"""The one import-path loader: both forms resolve, and every failure names the path and its use."""

from __future__ import annotations

import collections
import os.path

import pytest

from agentrl.importing import import_object


def test_the_colon_and_the_dotted_form_name_the_same_object():
    assert import_object("collections:OrderedDict") is collections.OrderedDict
    assert import_object("collections.OrderedDict") is collections.OrderedDict


def test_after_a_colon_the_attribute_may_be_dotted():
    assert import_object("os:path.join") is os.path.join


@pytest.mark.parametrize("path", ["", "   ", "OrderedDict", ":OrderedDict", "collections:", None])
def test_a_malformed_path_says_which_forms_are_expected(path):
    with pytest.raises(ValueError, match=r"widget.*'pkg\.module:name' or 'pkg\.module\.name'"):
        import_object(path, "widget")


def test_a_module_that_fails_to_import_is_an_import_error_naming_the_path(tmp_path, monkeypatch):
    (tmp_path / "broken_user_module.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    expected = "widget 'broken_user_module:f': cannot import module .*boom at import"
    with pytest.raises(ImportError, match=expected):
        import_object("broken_user_module:f", "widget")


def test_a_missing_attribute_names_the_module_and_the_attribute():
    expected = "widget 'collections:Nope': module 'collections' has no attribute 'Nope'"
    with pytest.raises(ImportError, match=expected):
        import_object("collections:Nope", "widget")
