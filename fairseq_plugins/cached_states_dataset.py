"""Adds the frozen verifier's cached encoder output and decoder states to samples.

With ``--cached-states DIR`` the draft loss reads what the verifier computed
once (:mod:`nmt_specdec.workflows.cache_states`) instead of running it: the
batch gains ``cached_encoder`` (S, B, C), ``cached_padding`` (B, S) and
``cached_states`` (B, T, C), rows in the batch's order, padded on the right.
"""

from __future__ import annotations

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset

from nmt_specdec.errors import UserError
from nmt_specdec.model.state_cache import StateCache


class CachedStatesDataset(BaseWrapperDataset):
    """Wraps a ``LanguagePairDataset``; item i gains the cache's sentence i."""

    def __init__(self, dataset, cache: StateCache, split: str):
        super().__init__(dataset)
        if len(cache) != len(dataset):
            raise UserError(f"--cached-states: the {split} cache has {len(cache)} sentences "
                            f"but the split has {len(dataset)}; rebuild it for this data")
        self.cache = cache
        self.split = split

    def __getitem__(self, index):
        item = dict(self.dataset[index])
        encoder, states = self.cache[index]
        if len(encoder) != len(item["source"]) or len(states) != len(item["target"]):
            raise UserError(f"--cached-states: sentence {index} of {self.split} has other "
                            "lengths in the cache than in the data; rebuild the cache")
        item["cached"] = (encoder, states)
        return item

    def collater(self, samples):
        batch = self.dataset.collater(samples)
        if not batch:
            return batch
        by_id = {s["id"]: s["cached"] for s in samples}  # the collater sorts rows
        rows = [by_id[int(i)] for i in batch["id"]]
        encoder, padding = _padded([e for e, _ in rows])
        batch["cached_encoder"] = encoder.transpose(0, 1)  # (S, B, C), as fairseq's encoder
        batch["cached_padding"] = padding
        batch["cached_states"], _ = _padded([s for _, s in rows])
        return batch


def _padded(arrays):
    """(B, L, C) float32 from (L_b, C) float16 arrays, and the (B, L) padding mask."""
    width = max(len(a) for a in arrays)
    out = np.zeros((len(arrays), width, arrays[0].shape[1]), dtype=np.float32)
    padding = np.ones((len(arrays), width), dtype=bool)
    for row, array in enumerate(arrays):
        out[row, : len(array)] = array
        padding[row, : len(array)] = False
    return torch.from_numpy(out), torch.from_numpy(padding)
