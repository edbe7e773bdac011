"""The running batch's tensors: rows dropped when they finish, rows merged in when they join."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


def mergeable(cache: Any) -> bool:
    # Only plain growing caches can be left-padded and stacked; sliding-window or
    # hybrid caches fall back to joining at batch boundaries.
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer).__name__ == "DynamicLayer" for layer in layers)


def _left_pad(t: torch.Tensor, width: int) -> torch.Tensor:
    extra = width - t.shape[-2]
    if extra == 0:
        return t
    shape = (*t.shape[:-2], extra, t.shape[-1])
    return torch.cat([t.new_zeros(shape), t], dim=-2)


@dataclass
class Rows:
    """The running batch: one row per request, caches left-padded to a common width."""

    reqs: list[Any]
    cache: Any
    logits: torch.Tensor  # (B, V) next-token logits
    mask: torch.Tensor  # (B, T) 1 where the cache holds a real token
    next_pos: torch.Tensor  # (B, 1) position of each row's next token

    def select(self, keep: list[int], tokens: torch.Tensor) -> torch.Tensor:
        """Drop finished rows so they cost nothing further; returns their kept tokens."""
        idx = torch.tensor(keep, device=self.mask.device)
        self.cache.batch_select_indices(idx)
        self.mask, self.next_pos = self.mask[idx], self.next_pos[idx]
        self.reqs = [self.reqs[i] for i in keep]
        return tokens[idx]

    def merge(self, other: Rows) -> None:
        """Stack `other`'s rows under ours; masked zero padding keeps every row exact."""
        width = max(self.mask.shape[1], other.mask.shape[1])
        for mine, theirs in zip(self.cache.layers, other.cache.layers, strict=True):
            mine.keys = torch.cat([_left_pad(mine.keys, width), _left_pad(theirs.keys, width)])
            mine.values = torch.cat(
                [_left_pad(mine.values, width), _left_pad(theirs.values, width)]
            )
        pad = lambda m: torch.cat([m.new_zeros(m.shape[0], width - m.shape[1]), m], dim=1)  # noqa: E731
        self.mask = torch.cat([pad(self.mask), pad(other.mask)])
        self.logits = torch.cat([self.logits, other.logits])
        self.next_pos = torch.cat([self.next_pos, other.next_pos])
        self.reqs = self.reqs + other.reqs
