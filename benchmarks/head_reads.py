"""What the draft head reads, and where it trains: variants tried on the shipped head.

Issue 66's lever "what it reads". The head reads one verifier state, the top
layer's at the position before the last committed token c (``DraftHead``'s
anchor). Each variant trains the shipped head on for the same updates, on the
same batches, and reports its slot accuracy on valid:

- ``control``: the head as it is;
- ``history``: the W anchors before c (each an earlier committed token, its
  position and the top state that predicted it; clamped at the sentence start)
  as extra rows of the bidirectional block: the sequence of states EAGLE's
  drafter reads, with no new weights;
- ``fused``: the verifier's layer-2 and layer-4 states at the anchor, layer-normed,
  added through a zero-initialised projection (EAGLE-3's low and middle
  features), so training starts from the head as it is;
- ``fused-only``: the same, training the projection alone at 5 times the
  learning rate: whether those states hold anything the head can use;
- ``after-miss``: the control's head, ``--miss-share`` of its cuts drawn from
  the anchors that follow a miss of the shipped head's slot-1 draft (the
  anchors after a correction, where decoding meets the head at its weakest:
  EAGLE-3's training-time test in spirit, for a head whose inputs are the
  verifier's own and so never its own drafts).

The labels are the verifier's argmax along the reference (teacher-forced), so
slot 1's accuracy is exactly the rate at which its draft would be accepted;
later slots are approximate. "first" is the bidirectional pass, "refined" the
refinement pass (teacher-forced on the reference tokens; slot 1's refined draft
is the one decoding proposes); "after a miss" is refined slot 1 at every valid
anchor that follows a miss of the shipped head. Verifier states are computed
once, in memory; ``--save-heads`` writes the trained heads (control and
after-miss) as head files, for ``draft_trees.py`` and the engine.

Example (the data as ``nmt-specdec-prepare-gettext`` writes it)::

    python benchmarks/head_reads.py --raw work/gt/raw --train-sentences 30000 --updates 1200
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from nmt_specdec import logs  # noqa: E402

logs.setup()

from nmt_specdec.model import train_layers  # noqa: E402
from nmt_specdec.model.chunked_loss import summed_nll  # noqa: E402
from nmt_specdec.model.draft_head import project_slots  # noqa: E402
from nmt_specdec.model.draft_examples import sample_cuts  # noqa: E402
from nmt_specdec.model.positions import embed_positions_at  # noqa: E402

LOW_LAYERS = (2, 4)  # the verifier's decoder layers the fused variant reads


def read_pairs(raw: Path, split: str, count: int, spm, dicts) -> List[tuple]:
    """``count`` random (source, target) id tensors of ``split``, EOS-ended."""
    lines = [(raw / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
             for lang in ("de", "en")]
    order = list(range(len(lines[0])))
    random.Random(1).shuffle(order)

    def ids(line: str, d) -> Tensor:
        return torch.tensor([d.index(p) for p in spm.encode(line, out_type=str)][:200]
                            + [d.eos()])
    return [(ids(lines[0][i], dicts[0]), ids(lines[1][i], dicts[1])) for i in order[:count]]


@torch.no_grad()
def cache(model, pairs: List[tuple], bos: int, pad: int) -> List[Dict[str, Tensor]]:
    """Per sentence: encoder output, target, the verifier's teacher-forced argmax
    (``label``), its top states and the layer-2/4 states, float16."""
    out: List[Dict[str, Tensor]] = [{} for _ in pairs]
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))  # little padding
    for start in range(0, len(pairs), 64):
        places = order[start:start + 64]
        chunk = [pairs[i] for i in places]
        width_s, width_t = max(len(s) for s, _ in chunk), max(len(t) for _, t in chunk)
        src = torch.full((len(chunk), width_s), pad)
        prev = torch.full((len(chunk), width_t), pad)
        for row, (s, t) in enumerate(chunk):
            src[row, width_s - len(s):] = s  # left-padded, as fairseq batches sources
            prev[row, 0], prev[row, 1:len(t)] = bos, t[:-1]
        enc = model.encoder(src, src_lengths=torch.tensor([len(s) for s, _ in chunk]))
        top, extra = model.decoder(prev, encoder_out=enc, features_only=True,
                                   return_all_hiddens=True)
        labels = model.decoder.output_layer(top).argmax(-1)
        low = torch.cat([extra["inner_states"][i] for i in LOW_LAYERS], -1).transpose(0, 1)
        for row, (s, t) in enumerate(chunk):
            n = len(t)
            out[places[row]] = {"enc": enc["encoder_out"][0][width_s - len(s):, row].half(),
                                "tgt": t, "label": labels[row, :n], "top": top[row, :n].half(),
                                "low": low[row, :n].half()}
    return out


def make_batch(items: List[Dict[str, Tensor]], cuts: int, pad: int,
               generator: torch.Generator, miss_share: float = 0.0) -> Dict[str, Tensor]:
    """Padded tensors of ``items`` and ``cuts`` random cut points per sentence, of
    which ``miss_share`` (rounded) are drawn from the sentence's ``after_miss`` cuts
    where it has any (:func:`mark_misses`)."""
    batch = padded(items, pad)
    chosen = sample_cuts(batch["lengths"], cuts, generator)
    from_misses = round(cuts * miss_share)
    for row, e in enumerate(items):
        after = e.get("after_miss")
        if from_misses and after is not None and after.numel():
            picks = torch.randint(after.numel(), (from_misses,), generator=generator)
            chosen[row, :from_misses] = after[picks]
    batch["cuts"] = chosen.view(-1)
    batch["rows"] = torch.arange(len(items)).repeat_interleave(cuts)
    return batch


def every_cut(items: List[Dict[str, Tensor]], pad: int,
              key: Optional[str] = None) -> Dict[str, Tensor]:
    """Padded tensors of ``items`` with every cut point of each sentence (``key``:
    only the cuts listed in each item's ``key``)."""
    batch = padded(items, pad)
    cuts = [torch.arange(int(n)) if key is None else e[key]
            for e, n in zip(items, batch["lengths"])]
    batch["cuts"] = torch.cat(cuts)
    batch["rows"] = torch.arange(len(items)).repeat_interleave(
        torch.tensor([c.numel() for c in cuts]))
    return batch


def padded(items: List[Dict[str, Tensor]], pad: int) -> Dict[str, Tensor]:
    """Padded tensors of ``items``: sources left-padded, targets right-padded."""
    width_s = max(e["enc"].size(0) for e in items)
    width_t = max(e["tgt"].numel() for e in items)
    batch = {"enc": torch.zeros(width_s, len(items), items[0]["enc"].size(1)),
             "padding": torch.ones(len(items), width_s, dtype=torch.bool),
             "tgt": torch.full((len(items), width_t), pad),
             "label": torch.full((len(items), width_t), pad),
             "top": torch.zeros(len(items), width_t, items[0]["top"].size(1)),
             "low": torch.zeros(len(items), width_t, items[0]["low"].size(1))}
    for row, e in enumerate(items):
        s, t = e["enc"].size(0), e["tgt"].numel()
        batch["enc"][width_s - s:, row] = e["enc"].float()
        batch["padding"][row, width_s - s:] = False
        for name in ("tgt", "label", "top", "low"):
            batch[name][row, :t] = e[name]
    batch["lengths"] = batch["tgt"].ne(pad).sum(1)
    return batch


@torch.no_grad()
def mark_misses(reader: "Reader", items: List[Dict[str, Tensor]]) -> float:
    """Stores in each item its ``after_miss`` cuts: c + 1 for every cut c at which
    the head's refined slot-1 draft differs from the verifier's label, i.e. the
    anchors that follow a correction, where the head is weakest; returns their
    share of all cuts. Every cut of a sentence is a block: ~3,000 blocks a second
    on 2 cores, about two minutes for 30,000 train sentences."""
    reader.eval()
    marked = total = 0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for start in range(0, len(items), 64):
            chunk = items[start:start + 64]
            batch = every_cut(chunk, reader.pad)
            _, refined, labels = reader(batch, projected=1)
            missed = (refined[:, 0].argmax(-1) != labels[:, 0]) & labels[:, 0].ne(reader.pad)
            for row, e in enumerate(chunk):
                mine = batch["rows"] == row
                cuts = batch["cuts"][mine][missed[mine]] + 1
                e["after_miss"] = cuts[cuts < e["tgt"].numel()]
                marked, total = marked + e["after_miss"].numel(), total + int(mine.sum())
    reader.train()
    return marked / max(total, 1)


class Reader(nn.Module):
    """The shipped head's first pass and refinement with one variant's inputs."""

    def __init__(self, head, kind: str, window: int, num_slots: int, bos: int, pad: int):
        super().__init__()
        self.head, self.kind, self.window, self.k = head, kind, window, num_slots
        self.bos, self.pad = bos, pad
        dim = head.start_state.numel()
        self.low = nn.Linear(len(LOW_LAYERS) * dim, dim) if kind.startswith("fused") else None
        if self.low is not None:
            nn.init.zeros_(self.low.weight)
            nn.init.zeros_(self.low.bias)

    def anchors(self, batch: Dict[str, Tensor], cut: Tensor) -> Tensor:
        """(N, C) the anchor rows of cut points ``cut`` (N,): the token before the
        cut, its position and the state that predicted it (the start at 0)."""
        head, rows = self.head, batch["rows"]
        has, before = cut > 0, (cut - 1).clamp(min=0)
        token = torch.where(has, batch["tgt"][rows, before], torch.full_like(cut, self.bos))
        state = torch.where(has[:, None], batch["top"][rows, before],
                            head.start_state.expand(len(cut), -1))
        weight = head.verifier.embed_tokens.weight.detach()
        x = head.embed_scale * F.embedding(token, weight, padding_idx=self.pad)
        x = x + head.state_proj(state)
        if self.low is not None:
            low = batch["low"][rows, before].view(len(cut), len(LOW_LAYERS), -1)
            low = F.layer_norm(low, low.shape[-1:]).flatten(1)
            x = x + torch.where(has[:, None], self.low(low), torch.zeros_like(x))
        return x + embed_positions_at(head.verifier.embed_positions, cut[:, None])[:, 0]

    def forward(self, batch: Dict[str, Tensor], projected: Optional[int] = None):
        """(first logits, refined logits, labels), (N, K, V) and (N, K); the block
        is always K slots, the first ``projected`` of them scored (default: all)."""
        head, cut, rows, k = self.head, batch["cuts"], batch["rows"], self.k
        slots = cut[:, None] + torch.arange(1, k + 1)
        masks = head.mask_embedding + embed_positions_at(head.verifier.embed_positions, slots)
        parts = [self.anchors(batch, cut)[:, None], masks]
        if self.kind == "history":
            parts = [self.anchors(batch, (cut - i).clamp(min=0))[:, None]
                     for i in range(self.window, 0, -1)] + parts
        x = head._dropout(torch.cat(parts, 1)).transpose(0, 1)
        for layer in head.layers:
            x = self._layer(layer, x, batch, None)
        x = head.layer_norm(x)[-(k + 1):]  # the anchor and the slots
        where = rows[:, None], (slots - 1).clamp(max=batch["tgt"].size(1) - 1)
        inside = slots - 1 < batch["lengths"][rows][:, None]
        labels = torch.where(inside, batch["label"][where], torch.full_like(slots, self.pad))
        follows = torch.where(inside, batch["tgt"][where], torch.full_like(slots, self.pad))
        last = torch.where(cut > 0, batch["tgt"][rows, (cut - 1).clamp(min=0)],
                           torch.full_like(cut, self.bos))
        y = head._dropout(head.refine_inputs(x.transpose(0, 1), last, follows)).transpose(0, 1)
        causal = torch.triu(y.new_full((k + 1, k + 1), float("-inf")), 1)
        for layer in head.refine_layers:
            y = self._layer(layer, y, batch, causal)
        y = head.refine_norm(y)
        weight = head.output_weight()
        end = 1 + (k if projected is None else projected)
        return project_slots(x[1:end], weight), project_slots(y[1:end], weight), labels[:, :end - 1]

    @staticmethod
    def _layer(layer, x: Tensor, batch: Dict[str, Tensor], mask: Optional[Tensor]) -> Tensor:
        memory = train_layers.source_rows(layer, batch["enc"], batch["padding"], batch["rows"])
        return train_layers.decoder_layer(layer, x, memory, mask)


def accuracy(reader: Reader, valid: List[dict], cuts: int) -> Tensor:
    """(2, K) slot accuracy of the first pass and the refinement on ``valid``."""
    reader.eval()
    generator = torch.Generator().manual_seed(123)
    hits, total = torch.zeros(2, reader.k), torch.zeros(reader.k)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for start in range(0, len(valid), 64):
            first, refined, labels = reader(make_batch(valid[start:start + 64], cuts,
                                                       reader.pad, generator))
            counted = labels.ne(reader.pad)
            hits[0] += ((first.argmax(-1) == labels) & counted).sum(0)
            hits[1] += ((refined.argmax(-1) == labels) & counted).sum(0)
            total += counted.sum(0)
    reader.train()
    return hits / total


def after_miss_accuracy(reader: Reader, valid: List[dict]) -> float:
    """Refined slot-1 accuracy at every ``after_miss`` cut of ``valid``."""
    reader.eval()
    hits = total = 0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for start in range(0, len(valid), 64):
            _, refined, labels = reader(every_cut(valid[start:start + 64], reader.pad,
                                                  "after_miss"), projected=1)
            counted = labels[:, 0].ne(reader.pad)
            hits += int(((refined[:, 0].argmax(-1) == labels[:, 0]) & counted).sum())
            total += int(counted.sum())
    reader.train()
    return hits / max(total, 1)


def train(reader: Reader, data: List[dict], valid: List[dict], args) -> List[tuple]:
    """Adam on the head (and the variant's projection) for ``args.updates``;
    (updates, seconds, accuracies) at the start and every ``args.eval_every``."""
    shared = {p.data_ptr() for p in reader.head.verifier.parameters()}
    params = [p for p in reader.parameters() if p.requires_grad and p.data_ptr() not in shared]
    lr = args.lr
    if reader.kind == "fused-only":
        params, lr = list(reader.low.parameters()), 5 * args.lr
    optimizer = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98))
    generator, picks = torch.Generator().manual_seed(7), random.Random(3)
    share = args.miss_share if reader.kind == "after-miss" else 0.0

    def mark(update: int, seconds: float) -> tuple:
        return (update, seconds, accuracy(reader, valid, args.cuts),
                after_miss_accuracy(reader, valid))
    marks, start = [mark(0, 0.0)], time.time()
    for update in range(1, args.updates + 1):
        batch = make_batch(picks.sample(data, args.batch_sentences), args.cuts,
                           reader.pad, generator, share)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            first, refined, labels = reader(batch)
        vocab = first.size(-1)
        target = labels.masked_fill(labels >= vocab, reader.pad).reshape(-1)
        loss = sum(summed_nll(logits.float().reshape(-1, vocab), target, reader.pad)
                   for logits in (first, refined)) / max(int(target.ne(reader.pad).sum()), 1)
        for group in optimizer.param_groups:
            group["lr"] = lr * min(1.0, update / 50)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        if update % args.eval_every == 0 or update == args.updates:
            marks.append(mark(update, time.time() - start))
    return marks


MARK_HEADER = (f"{'variant':8} {'updates':>7} {'s':>5}  first-pass slot accuracy   "
               "refined slot accuracy   refined slot 1 after a miss")


def mark_row(kind: str, update: int, seconds: float, acc, after: float) -> str:
    """One row under ``MARK_HEADER``: a variant's slot accuracies at one mark."""
    return (f"{kind:8} {update:7d} {seconds:5.0f}  {' '.join(f'{a:.3f}' for a in acc[0])}   "
            f"{' '.join(f'{a:.3f}' for a in acc[1])}   {after:.3f}")


def add_training_args(p: argparse.ArgumentParser, updates: int, eval_every: int,
                      lr: float) -> None:
    """The data, batch and schedule options every head-training probe shares."""
    p.add_argument("--model-dir", type=Path, default=Path("models/gettext-de-en-base"))
    p.add_argument("--raw", type=Path, required=True, help="raw/ of nmt-specdec-prepare-gettext")
    p.add_argument("--train-sentences", type=int, default=30000)
    p.add_argument("--valid-sentences", type=int, default=600)
    p.add_argument("--updates", type=int, default=updates)
    p.add_argument("--eval-every", type=int, default=eval_every)
    p.add_argument("--batch-sentences", type=int, default=48)
    p.add_argument("--cuts", type=int, default=4)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--threads", type=int, default=2)


def load_cached(args: argparse.Namespace):
    """``(model, train items, valid items, bos, pad)``: the model in eval mode and
    the verifier's states cached for the sentences asked for; prints the setup."""
    import fairseq_plugins  # noqa: F401  (the SpecDec task and model)
    from sampling_speed import load

    from nmt_specdec.evaluation.machine import cpu_model

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    task, model, spm = load(args.model_dir)
    model.eval()
    dicts = (task.source_dictionary, task.target_dictionary)
    bos, pad = dicts[1].eos(), dicts[1].pad()  # fairseq starts decoding with EOS
    data = cache(model, read_pairs(args.raw, "train", args.train_sentences, spm, dicts), bos, pad)
    valid = cache(model, read_pairs(args.raw, "valid", args.valid_sentences, spm, dicts),
                  bos, pad)
    print(f"{args.model_dir}: {len(data)} train / {len(valid)} valid sentences, "
          f"{args.batch_sentences} sentences x {args.cuts} cuts an update, lr {args.lr}, "
          f"K={args.k}, {cpu_model()}, {args.threads} threads")
    return model, data, valid, bos, pad


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", nargs="+", default=["control", "history", "fused"],
                   choices=["control", "history", "fused", "fused-only", "after-miss"])
    p.add_argument("--miss-share", type=float, default=0.5,
                   help="after-miss: the share of cuts drawn where the head's draft missed")
    p.add_argument("--save-heads", type=Path, default=None,
                   help="writes each variant's head file here (VARIANT.pt)")
    p.add_argument("--window", type=int, default=4, help="earlier anchors the history reads")
    add_training_args(p, updates=1200, eval_every=300, lr=2e-4)
    args = p.parse_args(argv)
    model, data, valid, bos, pad = load_cached(args)
    start_weights = {n: t.clone() for n, t in model.draft_head.state_dict().items()}
    marker = Reader(model.draft_head, "control", args.window, args.k, bos, pad)
    share = mark_misses(marker, valid)
    if "after-miss" in args.variants:
        print(f"cuts after a miss of the shipped head's slot 1: {mark_misses(marker, data):.3f} "
              f"of train's, {share:.3f} of valid's; after-miss draws {args.miss_share} of its cuts "
              "there")
    print(MARK_HEADER)
    for kind in args.variants:
        model.draft_head.load_state_dict(start_weights)
        reader = Reader(model.draft_head, kind, args.window, args.k, bos, pad)
        for marks in train(reader, data, valid, args):
            print(mark_row(kind, *marks), flush=True)
        if args.save_heads is not None and reader.low is None and kind != "history":
            from nmt_specdec.model.head_file import write_head_file

            write_head_file(model, args.save_heads / f"{kind}.pt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
