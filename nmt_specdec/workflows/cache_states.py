"""One pass of a frozen verifier over a binarized split, kept for head training.

For every sentence pair of ``{data}/{split}`` (the distilled targets, when the
data is the distilled set ``nmt-specdec-add-draft-head`` assembles) the
verifier's encoder output and its teacher-forced decoder states over
``[BOS] + target[:-1]`` are written to a :mod:`~nmt_specdec.model.state_cache`
in float16 shards. ``translation_specdec --cached-states DIR`` then trains the
head from ``DIR/{split}`` and never runs the verifier.

Resumable: finished shards are kept, so the same call continues an interrupted
pass; a cache of another verifier or another split is rebuilt.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch
from tqdm import tqdm

from nmt_specdec.data.steps import LOG
from nmt_specdec.model import state_cache
from nmt_specdec.model.head_file import verifier_fingerprint
from nmt_specdec.workflows.distill import make_batches

SHARD_SENTENCES = 8192


def load_verifier(checkpoint: Path, data: Path):
    """(model, task) of a stock transformer checkpoint on ``data``, in eval mode
    (as a frozen verifier runs while its head trains: no dropout)."""
    from nmt_specdec import checkpoints

    checkpoints.register_plugin()
    model, task = checkpoints.load(str(checkpoint), {"data": str(data)})
    return model.eval(), task


def split_fingerprint(dataset) -> str:
    """sha256 of a language-pair dataset's sentences (source and target ids, in order)."""
    digest = hashlib.sha256()
    for index in range(len(dataset)):
        for tokens in (dataset.src[index], dataset.tgt[index]):
            digest.update(np.asarray(tokens, dtype=np.int32).tobytes() + b"|")
    return digest.hexdigest()


def run(checkpoint: Path, data: Path, split: str, out: Path, *, device: str = "cpu",
        max_tokens: int = 8192, shard_sentences: int = SHARD_SENTENCES,
        progress: bool = True) -> state_cache.StateCache:
    """Writes (or completes) the cache of ``split`` in ``out``; returns it."""
    model, task = load_verifier(checkpoint, data)
    model.to(device)
    task.load_dataset(split, combine=True)
    dataset = task.dataset(split)
    meta = state_cache.CacheMeta(
        verifier=verifier_fingerprint(model, torch.float16), data=split_fingerprint(dataset),
        dim=model.decoder.embed_tokens.embedding_dim, sentences=len(dataset),
        shard_size=shard_sentences)
    state_cache.prepare(out, meta)
    todo = [i for i in range(state_cache.num_shards(meta))
            if state_cache.open_shard(out, i, meta.dim) is None]
    if todo:
        LOG.info("verifier states of %s: %d of %d shards to write into %s", split, len(todo),
                 state_cache.num_shards(meta), out)
    bos = task.target_dictionary.eos()  # fairseq starts decoding with EOS
    pad = task.target_dictionary.pad()
    for index in tqdm(todo, desc=f"verifier states ({split})", unit="shard",
                      disable=not progress or not todo):
        start = index * shard_sentences
        stop = min(start + shard_sentences, len(dataset))
        encoder, states = _pass(model, dataset, range(start, stop), bos, pad, max_tokens)
        state_cache.write_shard(out, index, encoder, states)
    return state_cache.StateCache(out)


@torch.no_grad()
def _pass(model, dataset, indices: range, bos: int, pad: int, max_tokens: int):
    """Per sentence of ``indices`` (in order): (S, C) encoder output, (T, C) states."""
    device = next(model.parameters()).device
    lengths = {i: max(len(dataset.src[i]), len(dataset.tgt[i])) for i in indices}
    encoder: Dict[int, torch.Tensor] = {}
    states: Dict[int, torch.Tensor] = {}
    for batch in make_batches(lengths, indices, max_tokens, batch_size=512):
        sources = [dataset.src[i] for i in batch]
        targets = [dataset.tgt[i] for i in batch]
        src = _right_padded(sources, pad).to(device)
        prev = _right_padded([torch.cat([t.new_full((1,), bos), t[:-1]]) for t in targets],
                             pad).to(device)
        out = model.encoder(src, src_lengths=src.ne(pad).sum(1))
        features, _ = model.decoder(prev, encoder_out=out, features_only=True)
        memory = out["encoder_out"][0].transpose(0, 1)  # (B, S, C)
        for row, index in enumerate(batch):
            encoder[index] = memory[row, : len(sources[row])]
            states[index] = features[row, : len(targets[row])]
    return [encoder[i] for i in indices], [states[i] for i in indices]


def _right_padded(rows: List[torch.Tensor], pad: int) -> torch.Tensor:
    width = max(len(row) for row in rows)
    out = rows[0].new_full((len(rows), width), pad)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out
