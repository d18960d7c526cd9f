"""The Batch container keeps tensors and per-sample metadata aligned."""

import pickle

import pytest
import torch

from agentrl.core.batch import Batch


def make(n=4):
    return Batch.from_dict(
        {"ids": torch.arange(n * 3).view(n, 3), "score": torch.arange(n).float()},
        {"uid": [f"u{i}" for i in range(n)], "truth": [{"target": [str(i)]} for i in range(n)]},
    )


def test_index_split_concat_keep_alignment():
    b = make(5)
    picked = b.index([3, 1])
    assert picked["score"].tolist() == [3.0, 1.0]
    assert list(picked["uid"]) == ["u3", "u1"]
    parts = b.split(2)
    assert [len(p) for p in parts] == [2, 2, 1]
    joined = Batch.concat(parts)
    assert torch.equal(joined["ids"], b["ids"]) and list(joined["uid"]) == list(b["uid"])
    chunks = b.chunk(2)
    assert sum(len(c) for c in chunks) == 5


def test_shuffle_keeps_tensors_and_metadata_aligned():
    b = make(6)
    shuffled = b.shuffled(torch.Generator().manual_seed(0))
    assert shuffled["score"].tolist() != b["score"].tolist()
    for score, uid in zip(shuffled["score"].tolist(), shuffled["uid"], strict=True):
        assert uid == f"u{int(score)}"


def test_select_setitem_and_errors():
    b = make(3)
    only = b.select("ids", "uid")
    assert only.keys() == ["ids", "uid"]
    with pytest.raises(ValueError, match="leading size"):
        b["bad"] = torch.zeros(2)
    with pytest.raises(KeyError, match="no field 'nope'"):
        b["nope"]
    with pytest.raises(ValueError, match="disagree"):
        Batch.from_dict({"a": torch.zeros(2)}, {"b": [1, 2, 3]})
    b["flag"] = [True, False, True]
    assert list(b.index([2])["flag"]) == [True]


def test_pickles_for_ray():
    b = make(3)
    again = pickle.loads(pickle.dumps(b))
    assert torch.equal(again["ids"], b["ids"]) and list(again["truth"]) == list(b["truth"])
