"""The toy corpus and questions of the evaluation tests (importable by test modules)."""

from __future__ import annotations

import re

from support.scripted_engine import response_part

PASSAGES = [
    ("Paris", "Paris is the capital and largest city of France. It lies on the Seine."),
    ("Jane Austen", "Jane Austen was an English novelist known for Pride and Prejudice."),
    ("Apollo 11", "Apollo 11 was the first mission to land humans on the Moon in 1969."),
    ("Jupiter", "Jupiter is the largest planet in the solar system."),
    ("Berlin", "Berlin is the capital of Germany. The city has many museums and parks."),
    ("Mount Everest", "Mount Everest is the highest mountain on Earth, in the Himalayas."),
]

QUESTIONS = [
    ("q1", "What is the capital of France", ["Paris"]),
    ("q2", "Who wrote Pride and Prejudice", ["Jane Austen"]),
    ("q3", "Which mission first landed humans on the Moon", ["Apollo 11"]),
    ("q4", "What is the largest planet in the solar system", ["Jupiter"]),
    ("q5", "What is the capital of Germany", ["Berlin"]),
    ("q6", "Which river does the capital of France lie on", ["Seine"]),
]


def searching_policy(context: str) -> str:
    """Search once with the question, then answer with the title of the first document."""
    response = response_part(context)
    if "<information>" not in response:
        question = re.search(r"Question: (.*?)\?", context).group(1)
        return f"<think> I should look this up. </think> <search> {question} </search>"
    title = re.search(r'Doc 1\(Title: "?([^")]+)"?\)', response).group(1)
    return f"<think> The first document answers it. </think> <answer> {title} </answer>"
