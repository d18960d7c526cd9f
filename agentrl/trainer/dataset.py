"""The RL prompt dataset and a loader that can stop and resume at the exact position.

Rows follow the Search-R1 parquet layout (``data_source``, ``prompt`` as chat messages,
``reward_model.ground_truth``, ``extra_info``), from parquet or jsonl files. Prompts are
tokenized once, through the tokenizer's chat template when it has one; prompts longer
than ``max_prompt_length`` are left out, never truncated (a cut question is a different
question), and reported: how many, and the first ids, on the console when the datasets are
built and as ``data/filtered_overlong_prompts`` at every step. (A longer instruction, e.g.
one that describes more tools, makes every prompt longer.)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from tqdm import tqdm

from agentrl.agent.prompts import encode_messages
from agentrl.agent.trajectory import PromptSpec
from agentrl.config.schema import DataConfig

REQUIRED_FIELDS = ("data_source", "prompt", "reward_model")


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a parquet or jsonl file in the Search-R1 layout, checked field by field."""
    path = Path(path)
    if path.suffix == ".parquet":
        rows = pq.read_table(path).to_pylist()
    elif path.suffix in (".jsonl", ".json"):
        rows = []
        with path.open() as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as error:
                        raise ValueError(f"{path}:{number}: not valid JSON ({error.msg})") from None
    else:
        raise ValueError(f"{path}: expected a .parquet or .jsonl file")
    for number, row in enumerate(rows, 1):
        missing = [f for f in REQUIRED_FIELDS if f not in row]
        if missing:
            raise ValueError(f"{path}: row {number} lacks field(s) {missing} (expected the Search-R1 layout)")
        if not isinstance(row["prompt"], list) or not row["prompt"]:
            raise ValueError(f"{path}: row {number}: 'prompt' must be a non-empty list of chat messages")
    return rows


SHOWN_IDS = 5  # overlong prompts named in the warning


@dataclass
class PromptDataset:
    prompts: list[PromptSpec]
    filtered_overlong: int  # prompts left out as longer than max_prompt_length
    overlong_ids: list[str] = field(default_factory=list)  # their row ids, in file order


PromptEncoder = Callable[[list[dict[str, Any]]], list[int]]  # chat messages → prompt ids


def prompt_spec(
    row: dict[str, Any],
    tokenizer: Any,
    source_file: str = "",
    index: int = 0,
    encode: PromptEncoder | None = None,
) -> PromptSpec:
    """One training row as the rollout takes it: its chat messages tokenized by ``encode`` (the
    rollout's, ``agent.generation.prompt_encoder``: with the tools' schemas in ``hermes``) or,
    without it, through the tokenizer's chat template when it has one; the messages are kept,
    so the rollout encodes them through its format; ``index`` when the row's ``extra_info``
    has none, and the row's ``question`` in ``extra_info`` (what ``reward.judge`` asks about)."""
    extra = dict(row.get("extra_info") or {})
    if "question" in row and "question" not in extra:  # the bare question, for an LLM judge's request
        extra["question"] = row["question"]
    messages = [dict(m) for m in row["prompt"]]
    return PromptSpec(
        prompt_ids=encode(messages) if encode is not None else encode_messages(tokenizer, messages),
        data_source=str(row["data_source"]),
        ground_truth=row["reward_model"]["ground_truth"],
        index=extra.get("index", index),
        extra_info=extra | {"source_file": source_file},
        messages=messages,
    )


def build_prompt_dataset(
    files: list[str],
    tokenizer: Any,
    max_prompt_length: int,
    desc: str = "prompts",
    encode: PromptEncoder | None = None,
) -> PromptDataset:
    prompts, overlong = [], []
    rows = [(path, row) for path in files for row in read_rows(path)]
    for path, row in tqdm(rows, desc=f"tokenizing {desc}", disable=len(rows) < 2000):
        spec = prompt_spec(row, tokenizer, str(Path(path).name), len(prompts), encode)
        if len(spec.prompt_ids) > max_prompt_length:
            overlong.append(str(row.get("id", spec.index)))
            continue
        prompts.append(spec)
    if not prompts:
        raise ValueError(
            f"no usable prompts in {files} ({len(overlong)} longer than "
            f"max_prompt_length={max_prompt_length}; ids: {', '.join(overlong[:SHOWN_IDS])})"
        )
    return PromptDataset(prompts, len(overlong), overlong)


def overlong_warning(name: str, dataset: PromptDataset, max_prompt_length: int) -> str:
    """The console's words for the prompts ``dataset`` left out."""
    total = len(dataset.prompts) + dataset.filtered_overlong
    shown = ", ".join(dataset.overlong_ids[:SHOWN_IDS])
    more = ", ..." if dataset.filtered_overlong > SHOWN_IDS else ""
    return (
        f"warning: {name}: {dataset.filtered_overlong} of {total} prompts are longer than "
        f"data.max_prompt_length={max_prompt_length} tokens and are left out (ids: {shown}{more}); "
        "raise data.max_prompt_length or shorten them"
    )


def build_datasets(
    data: DataConfig, tokenizer: Any, encode: PromptEncoder | None = None
) -> tuple[PromptDataset, PromptDataset | None]:
    """The training prompts and the validation prompts (None without ``data.val_files``), encoded
    by ``encode`` (``prompt_spec``); how many of each were left out as longer than
    ``data.max_prompt_length``, and which, is printed to stderr (``overlong_warning``)."""
    train = build_prompt_dataset(data.train_files, tokenizer, data.max_prompt_length, "train", encode)
    val = (
        build_prompt_dataset(data.val_files, tokenizer, data.max_prompt_length, "validation", encode)
        if data.val_files
        else None
    )
    for name, dataset in (("train", train), ("validation", val)):
        if dataset is not None and dataset.filtered_overlong:
            tqdm.write(overlong_warning(name, dataset, data.max_prompt_length), file=sys.stderr)
    return train, val


class StatefulLoader:
    """Seeded, epoch-shuffled batches of prompts; ``state_dict()`` pins the exact position.

    The order of epoch e is a permutation drawn from ``seed + e``, so resuming at
    (epoch, position) reproduces the remaining batches exactly.
    """

    def __init__(
        self, items: list[Any], batch_size: int, shuffle: bool = True, seed: int = 0, drop_last: bool = True
    ):
        if batch_size > len(items):
            raise ValueError(f"batch size {batch_size} exceeds the dataset's {len(items)} prompts")
        self.items = items
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self.position = 0

    def __len__(self) -> int:
        full, rest = divmod(len(self.items), self.batch_size)
        return full + (0 if self.drop_last or rest == 0 else 1)

    def _order(self) -> np.ndarray:
        if not self.shuffle:
            return np.arange(len(self.items))
        return np.random.default_rng(self.seed + self.epoch).permutation(len(self.items))

    @property
    def epochs_completed(self) -> int:
        """Epochs whose every batch has been drawn (``epoch`` itself only advances when the
        *next* batch is drawn, so it lags by one right after an epoch's last batch)."""
        return self.epoch + int(self.position >= len(self))

    def next_batch(self) -> list[Any]:
        """The next batch, rolling over to a new epoch (and a new order) when one is spent."""
        if self.position >= len(self):
            self.epoch += 1
            self.position = 0
        order = self._order()
        start = self.position * self.batch_size
        self.position += 1
        return [self.items[i] for i in order[start : start + self.batch_size]]

    def __iter__(self) -> Iterator[list[Any]]:
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position, self.seed = state["epoch"], state["position"], state["seed"]
