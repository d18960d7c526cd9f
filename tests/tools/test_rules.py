"""The rules every tool set keeps (``agentrl.tools.rules``), which the registry, check and tools share."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from agentrl.tools.rules import (
    Claims,
    Clash,
    OptionNames,
    check_option_types,
    check_options,
    did_you_mean,
    option_names,
)


class Plain:
    def __init__(self, url: str, topk: int = 3, *, tag: str = "search") -> None:
        self.url = url


@dataclass(frozen=True)
class WeatherOptions:
    city: str
    days: int = 3
    metric: bool = True
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        check_option_types(self, "weather")


class Weather:
    options_class = WeatherOptions

    def __init__(self, **options: object) -> None:
        check_options(type(self), options, "weather")
        self.options = WeatherOptions(**options)  # type: ignore[arg-type]


def test_did_you_mean_names_the_closest_choice_or_nothing_when_none_is_close():
    assert did_you_mean("urll", ["url", "topk"]) == " (did you mean 'url'?)"
    assert did_you_mean("ech", ["echo"], for_name=True) == " (did you mean 'echo' for 'ech'?)"
    assert did_you_mean("zzz", ["url", "topk"]) == ""


def test_a_constructors_keywords_are_its_options_and_those_without_a_default_are_required():
    assert option_names(Plain) == OptionNames(frozenset({"url", "topk", "tag"}), frozenset({"url"}))
    assert option_names(dict) is None  # takes any keyword: the call decides


def test_an_options_class_names_the_options_of_a_tool_that_takes_any_keyword():
    expected = OptionNames(frozenset({"city", "days", "metric", "timeout_s"}), frozenset({"city"}))
    assert option_names(Weather) == option_names(WeatherOptions) == expected


def test_an_unknown_option_is_refused_with_the_closest_one_and_a_missing_one_by_name():
    with pytest.raises(
        ValueError, match=r"^w: unknown option\(s\) \['topkk'\]: Plain takes no option 'topkk' "
    ):
        check_options(Plain, {"url": "u", "topkk": 2}, "w")
    with pytest.raises(
        ValueError, match=r"no option 'dayz' \(did you mean 'days'\?\); its options are \['city', "
    ):
        Weather(city="Oslo", dayz=2)
    with pytest.raises(ValueError, match=r"weather: missing required option\(s\) \['city'\]"):
        Weather(days=2)
    assert Weather(city="Oslo").options == WeatherOptions("Oslo")


def test_an_options_value_of_the_wrong_type_is_refused_naming_the_option_and_what_was_expected():
    with pytest.raises(ValueError, match=r"weather: option 'days' must be an integer, got '3'"):
        WeatherOptions("Oslo", days="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"option 'days' must be an integer, got True"):
        WeatherOptions("Oslo", days=True)
    with pytest.raises(ValueError, match=r"option 'metric' must be true or false, got 1"):
        WeatherOptions("Oslo", metric=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"option 'timeout_s' must be a number or null, got 'soon'"):
        WeatherOptions("Oslo", timeout_s="soon")  # type: ignore[arg-type]
    assert WeatherOptions("Oslo", timeout_s=5).timeout_s == 5  # an integer is a number


def test_claims_report_the_first_tag_or_name_another_holder_has_in_the_order_given():
    claims: Claims[str] = Claims()
    assert claims.claim("first", tag="search", name="search") is None
    assert claims.claim("second", tag="lookup", name="lookup") is None
    assert claims.claim("third", tag="find", name="search") == Clash("name", "search", "first")
    assert claims.claim("fourth", name="lookup", tag="lookup") == Clash("name", "lookup", "second")
    assert claims.claim("fifth", tag="lookup", name="lookup") == Clash("tag", "lookup", "second")
    assert claims.claim("sixth", tag="find", name="find") is None  # the clash above claimed nothing
