"""``Batch``: the unit the trainer passes between roles.

Tensors with a shared leading batch dimension live in a ``tensordict.TensorDict`` (which
already knows how to index, split, concatenate, move and pickle them for Ray); per-sample
Python values (ground truths, data sources, group ids, rendered text) live beside them
as object arrays of the same length, and every operation keeps the two aligned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

Index = int | slice | Sequence[int] | torch.Tensor | np.ndarray


def _object_array(values: Iterable[Any]) -> np.ndarray:
    values = list(values)
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


class Batch:
    """Aligned tensors (``batch.tensors``) and per-sample metadata (``batch.meta``)."""

    def __init__(self, tensors: TensorDict, meta: Mapping[str, np.ndarray] | None = None) -> None:
        self.tensors = tensors
        self.meta: dict[str, np.ndarray] = dict(meta or {})
        size = self._size()
        for key, values in self.meta.items():
            if len(values) != size:
                raise ValueError(f"meta field '{key}' has {len(values)} entries, batch has {size}")

    # --- construction ---------------------------------------------------------------

    @classmethod
    def from_dict(
        cls,
        tensors: Mapping[str, torch.Tensor] | None = None,
        meta: Mapping[str, Iterable[Any]] | None = None,
    ) -> Batch:
        tensors = dict(tensors or {})
        meta_arrays = {k: _object_array(v) for k, v in (meta or {}).items()}
        sizes = {k: v.shape[0] for k, v in tensors.items()} | {k: len(v) for k, v in meta_arrays.items()}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"fields disagree on batch size: {sizes}")
        size = next(iter(sizes.values()), 0)
        return cls(TensorDict(tensors, batch_size=[size]), meta_arrays)

    @staticmethod
    def concat(batches: Sequence[Batch]) -> Batch:
        if not batches:
            raise ValueError("cannot concatenate an empty list of batches")
        meta_keys = set(batches[0].meta)
        for other in batches[1:]:
            if set(other.meta) != meta_keys:
                raise ValueError(f"meta keys differ: {sorted(meta_keys)} vs {sorted(other.meta)}")
        tensors = torch.cat([b.tensors for b in batches], dim=0)
        meta = {k: np.concatenate([b.meta[k] for b in batches]) for k in meta_keys}
        return Batch(tensors, meta)

    # --- access ---------------------------------------------------------------------

    def _size(self) -> int:
        return int(self.tensors.batch_size[0]) if len(self.tensors.batch_size) else 0

    def __len__(self) -> int:
        return self._size()

    def __contains__(self, key: str) -> bool:
        return key in self.tensors or key in self.meta

    def __getitem__(self, key: str) -> Any:
        if key in self.meta:
            return self.meta[key]
        if key in self.tensors:
            return self.tensors[key]
        raise KeyError(
            f"batch has no field '{key}'; tensors: {sorted(self.tensors.keys())}, meta: {sorted(self.meta)}"
        )

    def get(self, key: str, default: Any = None) -> Any:
        """The field, or ``default`` when the batch has none by that name (optional fields)."""
        if key not in self:
            return default
        return self[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            if value.shape[0] != len(self):
                raise ValueError(f"tensor '{key}' has leading size {value.shape[0]}, batch has {len(self)}")
            self.tensors[key] = value
        else:
            array = _object_array(value)
            if len(array) != len(self):
                raise ValueError(f"meta field '{key}' has {len(array)} entries, batch has {len(self)}")
            self.meta[key] = array

    def keys(self) -> list[str]:
        return sorted(self.tensors.keys()) + sorted(self.meta)

    # --- reshaping ------------------------------------------------------------------

    def select(self, *keys: str) -> Batch:
        missing = [k for k in keys if k not in self]
        if missing:
            raise KeyError(f"cannot select missing fields {missing}")
        tensor_keys = [k for k in keys if k in self.tensors]
        return Batch(self.tensors.select(*tensor_keys), {k: self.meta[k] for k in keys if k in self.meta})

    def index(self, idx: Index) -> Batch:
        if isinstance(idx, int):
            idx = [idx]
        if isinstance(idx, slice):
            positions: Any = idx
        else:
            positions = torch.as_tensor(np.asarray(idx), dtype=torch.long)
        meta_idx = positions if isinstance(positions, slice) else positions.numpy()
        return Batch(self.tensors[positions], {k: v[meta_idx] for k, v in self.meta.items()})

    def split(self, size: int) -> list[Batch]:
        """Consecutive chunks of ``size`` samples (the last may be shorter)."""
        if size < 1:
            raise ValueError(f"split size must be >= 1, got {size}")
        return [self.index(slice(start, start + size)) for start in range(0, len(self), size)]

    def chunk(self, parts: int) -> list[Batch]:
        """``parts`` nearly equal chunks, e.g. one per data-parallel worker."""
        if parts < 1:
            raise ValueError(f"chunk count must be >= 1, got {parts}")
        bounds = np.linspace(0, len(self), parts + 1).round().astype(int)
        return [self.index(slice(int(a), int(b))) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def shuffled(self, generator: torch.Generator) -> Batch:
        return self.index(torch.randperm(len(self), generator=generator))

    def to(self, device: str | torch.device) -> Batch:
        return Batch(self.tensors.to(device), self.meta)

    def __repr__(self) -> str:
        shapes = {k: tuple(v.shape) for k, v in self.tensors.items()}
        return f"Batch(size={len(self)}, tensors={shapes}, meta={sorted(self.meta)})"
