"""A prompt longer than data.max_prompt_length is left out and reported: how many, which, and on stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.config.schema import DataConfig
from agentrl.trainer.dataset import build_datasets


class WordTokenizer:
    """One token per word: prompt lengths that are easy to state."""

    chat_template = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(range(len(text.split())))


def rows_file(path: Path, words: list[int]) -> str:
    rows = [
        {
            "id": f"q{i}",
            "data_source": "nq",
            "prompt": [{"role": "user", "content": " ".join(["w"] * n)}],
            "reward_model": {"ground_truth": {"target": ["a"]}},
        }
        for i, n in enumerate(words)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_overlong_prompts_are_left_out_and_named_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    data = DataConfig(
        train_files=[rows_file(tmp_path / "train.jsonl", [3, 12, 4, 20, 11, 13, 14, 15, 16])],
        val_files=[rows_file(tmp_path / "val.jsonl", [3, 4])],
        max_prompt_length=10,
    )
    train, val = build_datasets(data, WordTokenizer())
    assert len(train.prompts) == 2 and train.filtered_overlong == 7
    assert train.overlong_ids == ["q1", "q3", "q4", "q5", "q6", "q7", "q8"]
    assert val is not None and val.filtered_overlong == 0 and val.overlong_ids == []
    err = capsys.readouterr().err
    assert (
        "warning: train: 7 of 9 prompts are longer than data.max_prompt_length=10 tokens and are left out "
        "(ids: q1, q3, q4, q5, q6, ...)"
    ) in err
    assert "validation" not in err


def test_a_dataset_with_no_prompt_short_enough_names_them(tmp_path: Path):
    data = DataConfig(train_files=[rows_file(tmp_path / "train.jsonl", [30, 40])], max_prompt_length=10)
    with pytest.raises(ValueError, match=r"2 longer than max_prompt_length=10; ids: q0, q1"):
        build_datasets(data, WordTokenizer())
