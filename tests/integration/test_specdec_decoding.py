"""SpecDec decoding of a trained toy model through fairseq's entry points (issue #4).

* lossless: with beta = 1 the output equals stock ``SequenceGenerator`` beam 1,
  at batch 1 and at batch 32;
* ``fairseq-interactive --spec-decoding`` answers every input line, in order;
* ``fairseq-generate --spec-decoding`` logs the decoding statistics at the end;
* the hub interface (``from_pretrained(...).translate()``) decodes with SpecDec.
"""

from __future__ import annotations

import argparse
import re
from typing import Dict, List

import pytest
from fairseq.dataclass.configs import GenerationConfig
import torch
from fairseq import checkpoint_utils
from fairseq.sequence_generator import SequenceGenerator

import fairseq_plugins  # noqa: F401  (registers task and model in this process)
from fairseq_plugins import generation_stats
from fairseq_plugins.specdec_model import SpecDecTransformerModel
from nmt_specdec.decoding.generator import SpecDecGenerator
from tests.helpers.fairseq_toy import hypotheses, run_cli
from tests.helpers.specdec_toy import SPECDEC_TOY_K, SpecDecToy

LOSSLESS_SHARE = 0.995
# A mismatch is only acceptable where the verifier's top two log-probs tie to
# float rounding: batched/cached and step-by-step decoding round differently.
NEAR_TIE = 1e-3


@pytest.fixture(scope="module")
def loaded(specdec_toy: SpecDecToy):
    """(model, task) in this process, SpecDec on (k = 4, beta = 1)."""
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(specdec_toy.checkpoint)],
        arg_overrides={
            "data": str(specdec_toy.data_bin),
            "spec_decoding": True,
            "spec_k": SPECDEC_TOY_K,
            "spec_beta": 1,
        },
    )
    model = models[0].eval()
    task.load_dataset("test")
    return model, task


def _generation_args() -> argparse.Namespace:
    return GenerationConfig(
        beam=1, max_len_a=0.0, max_len_b=200, min_len=1, lenpen=1.0, unkpen=0.0
    )


def _decode(generator, model, task, batch_size: int) -> Dict[int, List[int]]:
    """Sentence id -> output tokens over the whole test split, in input order."""
    dataset = task.datasets["test"]
    out: Dict[int, List[int]] = {}
    for start in range(0, len(dataset), batch_size):
        ids = range(start, min(start + batch_size, len(dataset)))
        sample = dataset.collater([dataset[i] for i in ids])
        hyps = generator.generate([model], sample)
        for sid, nbest in zip(sample["id"].tolist(), hyps):
            out[sid] = nbest[0]["tokens"].tolist()
    return out


def _top2_gap(model, task, sid: int, prefix: List[int]) -> float:
    """Verifier's top-1 minus top-2 log-prob after ``prefix`` (teacher forced)."""
    item = task.datasets["test"][sid]
    eos = task.target_dictionary.eos()
    src = item["source"].unsqueeze(0)
    prev = torch.tensor([[eos, *prefix]])
    with torch.no_grad():
        out = model(src, torch.tensor([src.size(1)]), prev)
        lprobs = model.get_normalized_probs(out, log_probs=True)[0, -1]
    top = lprobs.topk(2).values
    return float(top[0] - top[1])


@pytest.mark.parametrize("batch_size", [1, 32])
def test_beta1_equals_stock_greedy(loaded, batch_size: int) -> None:
    model, task = loaded
    tgt_dict = task.target_dictionary
    stock = SequenceGenerator(
        [model], tgt_dict, beam_size=1, max_len_a=0, max_len_b=200
    )
    spec = task.build_generator([model], _generation_args())
    assert isinstance(spec, SpecDecGenerator) and spec.options.beta == 1

    expected = _decode(stock, model, task, batch_size)
    got = _decode(spec, model, task, batch_size)

    assert sorted(got) == sorted(expected) == list(range(len(task.datasets["test"])))
    mismatches = [sid for sid in expected if got[sid] != expected[sid]]
    for sid in mismatches:
        a, b = expected[sid], got[sid]
        t = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)  # both end in EOS
        gap = _top2_gap(model, task, sid, a[:t])
        stock_word, spec_word = tgt_dict[a[t]], tgt_dict[b[t]]
        print(
            f"sentence {sid} differs at step {t}: stock {stock_word!r} vs specdec "
            f"{spec_word!r}; top-2 log-prob gap {gap:.2e} (a near-tie: float "
            "rounding picks either)"
        )
        assert gap < NEAR_TIE, f"sentence {sid}: not a near-tie, a real divergence"
    assert len(mismatches) <= (1 - LOSSLESS_SHARE) * len(expected), mismatches
    # The comparison is not vacuous: the trained draft head really speculated.
    assert spec.stats.sentences == len(expected)
    assert spec.stats.mean_accepted_tokens > 2.0, spec.stats.summary()


def test_interactive_answers_every_line_in_order(specdec_toy: SpecDecToy) -> None:
    lines = specdec_toy.test_lines("src")[:13]
    assert len(set(lines)) == len(lines)

    proc = run_cli(
        "interactive",
        [
            specdec_toy.data_bin,
            "--path",
            specdec_toy.checkpoint,
            *specdec_toy.decode_args(),
            "--beam",
            "1",
            "--buffer-size",
            "5",
            "--batch-size",
            "3",
        ],
        stdin="".join(line + "\n" for line in lines),
    )

    order = [
        int(line.split("\t")[0][2:])
        for line in proc.stdout.splitlines()
        if line.startswith("H-")
    ]
    assert order == list(range(len(lines)))
    hyps = hypotheses(proc.stdout)
    # Copy task: each answer is its own input line, so the order is the input's.
    correct = sum(hyps[i] == line for i, line in enumerate(lines))
    assert correct >= len(lines) - 1, proc.stdout


STATS_LINE = re.compile(
    r"SpecDec: (\d+) sentences, ([\d.]+) tokens/iteration, "
    r"([\d.]+) iterations/sentence, acceptance by slot \[([\d. ]+)\]"
)


def test_generate_logs_stats_at_the_end(specdec_toy: SpecDecToy) -> None:
    proc = run_cli(
        "generate",
        [
            specdec_toy.data_bin,
            "--path",
            specdec_toy.checkpoint,
            *specdec_toy.decode_args(),
            "--beam",
            "1",
            "--batch-size",
            "32",
        ],
    )

    hyps = hypotheses(proc.stdout)
    sources = specdec_toy.test_lines("src")
    assert sorted(hyps) == list(range(len(sources)))
    assert sum(hyps[i] == s for i, s in enumerate(sources)) >= 0.9 * len(
        sources
    )  # copy
    both = proc.stdout + proc.stderr
    assert len(STATS_LINE.findall(both)) == 1, both[-2000:]  # logged once
    # ... after fairseq's own end-of-run log line, in the same (logging) stream.
    done = f"Translated {len(sources)} sentences"
    lines = next(out for out in (proc.stdout, proc.stderr) if done in out).splitlines()
    stats = [i for i, line in enumerate(lines) if STATS_LINE.search(line)]
    assert stats and stats[0] > next(i for i, line in enumerate(lines) if done in line)
    sentences, per_iter, iters, slots = STATS_LINE.search(lines[stats[0]]).groups()
    assert int(sentences) == len(sources)
    # tokens/iteration x iterations/sentence = tokens per sentence (EOS included).
    tokens = sum(len(h.split()) + 1 for h in hyps.values()) / len(hyps)
    assert float(per_iter) * float(iters) == pytest.approx(tokens, rel=0.01)
    assert 2.0 < float(per_iter) <= SPECDEC_TOY_K + 1
    rates = [float(r) for r in slots.split()]
    assert len(rates) == SPECDEC_TOY_K and all(0 <= r <= 1 for r in rates)
    assert rates[0] > 0.8  # the draft head's slot 1 is nearly always right


def test_hub_translate_and_sample_use_specdec(specdec_toy: SpecDecToy) -> None:
    sentences = specdec_toy.test_lines("src")[:6]
    kwargs = dict(
        checkpoint_file=specdec_toy.checkpoint.name,
        data_name_or_path=str(specdec_toy.data_bin),
    )
    spec_hub = SpecDecTransformerModel.from_pretrained(
        str(specdec_toy.checkpoint.parent),
        spec_decoding=True,
        spec_k=SPECDEC_TOY_K,
        **kwargs,
    )
    stock_hub = SpecDecTransformerModel.from_pretrained(
        str(specdec_toy.checkpoint.parent), **kwargs
    )
    generator = spec_hub.task.build_generator(spec_hub.models, spec_hub.cfg.generation)
    assert isinstance(generator, SpecDecGenerator)
    assert not isinstance(
        stock_hub.task.build_generator(stock_hub.models, stock_hub.cfg.generation),
        SpecDecGenerator,
    )
    before = generation_stats.combined_stats().sentences

    translated = spec_hub.translate(sentences, beam=1)
    sampled = spec_hub.sample(sentences[0], beam=1)

    assert translated == stock_hub.translate(sentences, beam=1)
    assert sampled == translated[0]
    assert sum(t == s for t, s in zip(translated, sentences)) >= len(sentences) - 1
    total = generation_stats.combined_stats()
    assert total.sentences == before + len(sentences) + 1
    assert total.mean_accepted_tokens > 1.0
