"""--deterministic on cases where the batch really changes plain greedy decoding.

On a CPU the toy model's plain decodes rarely change with batch size, so a test
that only compares batchings would pass with a replay that does nothing. Here
each case is first shown to change plain decoding, then ``--deterministic`` must
give the batch-1 output in every batching:

* a real one: fairseq measures ``--max-len-a`` on the padded width of the batch,
  so a short sentence beside a long one may run longer than alone;
* a stand-in for shape-dependent arithmetic: the output projection is wrapped
  so that in a batch of several sentences one token's logit is raised, as a
  kernel whose rounding depends on the batch would move a near-tie. The replay
  decodes every sentence alone, so only the fast path's proposals see it.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.helpers.fairseq_toy import PLUGINS_DIR, hypotheses, run_cli
from tests.helpers.specdec_toy import SPECDEC_TOY_ALPHABET

pytestmark = pytest.mark.slow

# Sources of 3 and 10 symbols (the toy data's extremes); the model copies its input.
SHORT, LONG = " ".join(SPECDEC_TOY_ALPHABET[:3]), " ".join(SPECDEC_TOY_ALPHABET[:10])
# max_len = int(0.5 * width): 2 for SHORT alone (3 pieces + EOS), 5 beside LONG.
LENGTHS = ("--max-len-a", "0.5", "--max-len-b", "0")
GREEDY = ("--user-dir", PLUGINS_DIR, "--task", "translation_specdec", "--source-lang", "src",
          "--target-lang", "tgt", "--cpu", "--beam", "1", *LENGTHS)
ALONE = ("--batch-size", "1", "--buffer-size", "1")
TOGETHER = ("--batch-size", "2", "--buffer-size", "2")


def _interactive(toy, *flags: str) -> list[str]:
    out = run_cli("interactive", [toy.data_bin, "--path", toy.checkpoint, *GREEDY, *flags],
                  stdin=f"{SHORT}\n{LONG}\n").stdout
    hyps = hypotheses(out)
    return [hyps[0], hyps[1]]


def test_deterministic_keeps_each_sentences_own_length_limit(specdec_toy) -> None:
    plain_alone = _interactive(specdec_toy, *ALONE)
    plain_together = _interactive(specdec_toy, *TOGETHER)
    # The batch changes plain decoding: beside LONG, SHORT may run past its own limit.
    assert len(plain_alone[0].split()) == 2
    assert plain_together[0] != plain_alone[0], plain_together
    # The stock fast path proposes what the batch gave; SpecDec's, too, is replayed.
    for flags in (ALONE, TOGETHER, ("--spec-decoding", *TOGETHER)):
        assert _interactive(specdec_toy, "--deterministic", *flags) == plain_alone, flags


class BatchDependentProjection(nn.Module):
    """The output projection, plus ``shift`` on token ``favoured`` whenever it is
    called on more than one sentence (a batch-shape-dependent kernel, magnified)."""

    def __init__(self, inner: nn.Module, favoured: int, shift: float):
        super().__init__()
        self.inner, self.favoured, self.shift = inner, favoured, shift

    def forward(self, x):
        logits = self.inner(x)
        if x.size(0) > 1:
            logits = logits.clone()
            logits[..., self.favoured] += self.shift
        return logits


@pytest.fixture(scope="module")
def stock_toy(specdec_toy):
    """The toy model and its task, loaded for stock greedy (beam 1) decoding."""
    import fairseq_plugins  # noqa: F401  (safe loading, task registration)
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(specdec_toy.checkpoint)],
        arg_overrides={"data": str(specdec_toy.data_bin), "spec_decoding": False})
    task.load_dataset("test")
    return models[0].eval(), task


def _generator(task, model, deterministic: bool):
    from fairseq.dataclass.configs import GenerationConfig

    task.cfg.deterministic = deterministic
    return task.build_generator([model], GenerationConfig(beam=1, max_len_a=1.2, max_len_b=5))


def _decode(generator, model, task, indices: list[int], target: int) -> dict:
    dataset = task.dataset("test")
    sample = dataset.collater([dataset[i] for i in indices])
    row = sample["id"].tolist().index(target)  # the collater sorts by length
    return generator.generate([model], sample)[row][0]


def test_deterministic_overrides_batch_dependent_logits(stock_toy, monkeypatch) -> None:
    model, task = stock_toy
    dataset = task.dataset("test")
    by_length = sorted(range(len(dataset)), key=lambda i: dataset.src_sizes[i])
    target, neighbours = by_length[0], by_length[-8:]  # padded: the neighbours are longer
    plain, replayed = _generator(task, model, False), _generator(task, model, True)
    alone = _decode(plain, model, task, [target], target)["tokens"]
    favoured = next(t for t in range(task.target_dictionary.nspecial, len(task.target_dictionary))
                    if t not in alone.tolist())
    monkeypatch.setattr(model.decoder, "output_projection",
                        BatchDependentProjection(model.decoder.output_projection, favoured, 50.0))
    batch = neighbours + [target]
    # Plain greedy now depends on the batch; the replay, decoding alone, does not.
    assert torch.equal(_decode(plain, model, task, [target], target)["tokens"], alone)
    assert not torch.equal(_decode(plain, model, task, batch, target)["tokens"], alone)
    solo = _decode(replayed, model, task, [target], target)
    in_batch = _decode(replayed, model, task, batch, target)
    assert torch.equal(solo["tokens"], alone) and torch.equal(in_batch["tokens"], alone)
    assert solo["recomputed"] == 0  # alone the fast path already proposed these tokens
    assert in_batch["recomputed"] == len(alone)  # in the batch the replay redid them all
