"""Every engine against fairseq's ``SequenceGenerator(beam=1)``, option by option.

Tiny random fairseq Transformers (seeded, built in this process: with and
without a draft head, learned and sinusoidal positions, pre- and post-norm,
shared and separate embeddings) decode a padded batch and single sentences
with fairseq's own generator, built by fairseq's own task
(``FairseqTask.build_generator``), and with every engine the plugin builds
(``build_decoder``): K=0, a fixed K, ``auto``, draft trees, an oracle drafter
that proposes fairseq's output (so whole blocks are accepted), on the torch
backend and on ONNX Runtime (fp32 with ``--exact-scores``, and drafting with the
verifier's 8-bit copy). For every generation option the engine honours, tokens
must be equal and positional and sentence scores within ``ATOL``. Every option
the engine refuses must be refused in one line when the generator is built, and
every field of fairseq's ``GenerationConfig`` must be either.

Tolerance: the engine's passes compute the same float32 arithmetic in another
order (fused q/k/v, ``scaled_dot_product_attention``): ~1e-6 on these logits.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from functools import partial

import pytest
import torch
from fairseq.dataclass.configs import GenerationConfig

from nmt_specdec.decoding.build import build_decoder, fairseq_generator
from nmt_specdec.decoding.generation_config import HONOURED, OUTCOMES, REFUSED
from nmt_specdec.decoding.options import DecodingOptions
from nmt_specdec.errors import UserError
from tests.helpers.specdec_toy import (
    generation_config as beam_one_config,
    OracleDrafter,
    random_fairseq_model,
    select_rows,
    source_batch,
)

ATOL = 1e-5
SOURCE_LENGTHS = (3, 9, 6, 1, 7)
SINGLE = (1,)  # the row decoded alone
DIMS = ("--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
        "--encoder-layers", "2", "--decoder-layers", "2",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--dropout", "0")
HEAD = ("--task", "translation_specdec", "--arch", "specdec_transformer_tiny",
        "--draft-layers", "1", "--draft-block-size", "3", "--criterion", "specdec_joint_loss")
STOCK = ("--task", "translation", "--arch", "transformer")

# name -> (flags, seed); two with a draft head, two stock transformers.
MODELS: Dict[str, Tuple[Tuple[str, ...], int]] = {
    "head post-norm sinusoidal separate": (HEAD, 1),
    "head pre-norm learned shared": (HEAD + ("--decoder-normalize-before",
                                             "--encoder-normalize-before",
                                             "--decoder-learned-pos",
                                             "--share-decoder-input-output-embed"), 2),
    "stock post-norm learned shared-all": (STOCK + ("--decoder-learned-pos",
                                                    "--encoder-learned-pos",
                                                    "--share-all-embeddings"), 3),
    "stock pre-norm sinusoidal separate": (STOCK + ("--decoder-normalize-before",), 4),
}

# name -> GenerationConfig fields (beam 1 and max_len_b 12 throughout).
OPTIONS: Dict[str, Dict] = {
    "defaults": {},
    "unnormalized": {"unnormalized": True},
    "lenpen 0.6 unkpen -3": {"lenpen": 0.6, "unkpen": -3.0},
    "temperature 0.5 unkpen 1": {"temperature": 0.5, "unkpen": 1.0},
    "temperature 2.5": {"temperature": 2.5},
    "match-source-len": {"match_source_len": True},
    "no-repeat-ngram 2": {"no_repeat_ngram_size": 2},
    "no-repeat-ngram 3 min-len 4": {"no_repeat_ngram_size": 3, "min_len": 4},
    "max-len-a 0.5 b 3 unnormalized": {"max_len_a": 0.5, "max_len_b": 3, "unnormalized": True},
}

# name -> (DecodingOptions fields, needs a draft head, oracle drafter)
ENGINES: Dict[str, Tuple[Dict, bool, bool]] = {
    "torch K=0": ({"k": 0, "backend": "torch"}, False, False),
    "torch K=2": ({"k": 2, "backend": "torch"}, True, False),
    "torch auto": ({"k": None, "backend": "torch"}, True, False),
    "torch tree K=2 C=3": ({"k": 2, "candidates": 3, "backend": "torch"}, True, False),
    "torch oracle K=3": ({"k": 3, "backend": "torch"}, False, True),
    "onnxruntime K=0": ({"k": 0, "backend": "onnxruntime", "exact_scores": True}, False, False),
    "onnxruntime K=3": ({"k": 3, "backend": "onnxruntime", "exact_scores": True}, True, False),
    "onnxruntime 8-bit copy K=3": ({"k": 3, "backend": "onnxruntime", "exact_scores": True,
                                    "drafter": "verifier-int8"}, False, False),
    # The default fp32 graphs: an 8-bit output projection whose deciding logits are
    # certified in fp32, so tokens are exact and scores within ~3e-3 (docs/engine.md).
    "onnxruntime certified K=2": ({"k": 2, "backend": "onnxruntime"}, True, False),
}
ATOL_CERTIFIED = 5e-3
ONNX_MODELS = ("head pre-norm learned shared", "stock post-norm learned shared-all")


generation_config = partial(beam_one_config, max_len_b=12)  # beam 1


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Dict[str, tuple]:
    return {name: random_fairseq_model(tmp_path_factory.mktemp("differential"), (*DIMS, *flags),
                                       seed)
            for name, (flags, seed) in MODELS.items()}


class KernelNGramBlock(torch.nn.Module):
    """fairseq's n-gram blocking as its CUDA kernel does it
    (``ngram_repeat_block_cuda_kernel.cu``: one thread per start ``col`` below
    ``step - n + 2``, comparing ``tokens[col:col+n-1]`` with the last n-1 tokens up
    to ``step``). fairseq 0.12's CPU fallback compares the buffer's padded tail
    instead and blocks nothing; the engine blocks as the kernel does on every
    device, so the reference takes the kernel's rule."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def forward(self, tokens, lprobs, bsz: int, beam_size: int, step: int):
        starts = step - self.size + 2
        for row, row_tokens in enumerate(tokens.tolist()):
            for col in range(max(starts, 0)):
                if all(row_tokens[col + k] == row_tokens[starts + k]
                       for k in range(self.size - 1)):
                    lprobs[row, row_tokens[col + self.size - 1]] = -math.inf
        return lprobs


def fairseq_hypotheses(task, model, config, sample) -> List[dict]:
    generator = fairseq_generator(task, model, config)()
    if generator.repeat_ngram_blocker is not None:
        generator.repeat_ngram_blocker = KernelNGramBlock(config.no_repeat_ngram_size)
    return [hypos[0] for hypos in generator.generate([model], sample)]


def engine_hypotheses(task, model, config, sample, engine: str, reference) -> List[dict]:
    fields, _, oracle = ENGINES[engine]
    options = DecodingOptions(spec_decoding=True, **fields)
    if oracle:
        from nmt_specdec.decoding.generator import SpecDecGenerator

        drafter = OracleDrafter([h["tokens"] for h in reference], task.target_dictionary.pad())
        generator = SpecDecGenerator.from_generation_args(
            model, task.target_dictionary, options, config, drafter)
    else:
        generator = build_decoder(model, task.target_dictionary, options, config)
    return [hypos[0] for hypos in generator.generate([model], sample)]


def assert_equal_hypotheses(ours: List[dict], theirs: List[dict], case: str,
                            atol: float = ATOL) -> None:
    for row, (a, b) in enumerate(zip(ours, theirs)):
        where = f"{case}, row {row}"
        assert a["tokens"].tolist() == b["tokens"].tolist(), where
        torch.testing.assert_close(a["positional_scores"].float(), b["positional_scores"].float(),
                                   atol=atol, rtol=0, msg=where)
        score_a, score_b = float(a["score"]), float(b["score"])
        assert score_a == pytest.approx(score_b, abs=atol) or score_a == score_b, where


def _cases() -> List[Tuple[str, str, str, str]]:
    """(model, options, engine, batch) for every engine a model can run."""
    cases = []
    for model, options, engine, batch in itertools.product(MODELS, OPTIONS, ENGINES,
                                                           ("padded", "single")):
        fields, needs_head, _ = ENGINES[engine]
        if needs_head and not model.startswith("head"):
            continue
        if fields["backend"] == "onnxruntime" and model not in ONNX_MODELS:
            continue
        cases.append((model, options, engine, batch))
    return cases


CASES = _cases()


def test_enough_cases():
    assert len(CASES) >= 200


@pytest.mark.parametrize("model_name,options_name", list(itertools.product(MODELS, OPTIONS)))
def test_engines_equal_fairseq(models, model_name, options_name):
    task, model = models[model_name]
    config = generation_config(**OPTIONS[options_name])
    full = source_batch(task.source_dictionary, SOURCE_LENGTHS, seed=5)
    samples = {"padded": full, "single": select_rows(full, SINGLE)}
    checked = 0
    for batch, sample in samples.items():
        reference = fairseq_hypotheses(task, model, config, sample)
        for model_case, options_case, engine, batch_case in CASES:
            if (model_case, options_case, batch_case) != (model_name, options_name, batch):
                continue
            ours = engine_hypotheses(task, model, config, sample, engine, reference)
            atol = ATOL_CERTIFIED if "certified" in engine else ATOL
            assert_equal_hypotheses(ours, reference, f"{engine}, {batch}", atol)
            checked += 1
    assert checked


def test_options_change_fairseq_output(models):
    """Each honoured option changes fairseq's own output on these models, so the
    comparisons above could fail."""
    task, model = models["head post-norm sinusoidal separate"]
    sample = source_batch(task.source_dictionary, SOURCE_LENGTHS, seed=5)
    plain = fairseq_hypotheses(task, model, generation_config(), sample)
    for name, fields in OPTIONS.items():
        if not fields:
            continue
        changed = fairseq_hypotheses(task, model, generation_config(**fields), sample)
        assert any(a["tokens"].tolist() != b["tokens"].tolist()
                   or not torch.allclose(a["positional_scores"], b["positional_scores"])
                   or not math.isclose(float(a["score"]), float(b["score"]), abs_tol=1e-4)
                   for a, b in zip(plain, changed)), name


def test_every_generation_option_is_honoured_or_refused():
    declared = {f.name for f in dataclasses.fields(GenerationConfig) if not f.name.startswith("_")}
    assert declared - set(OUTCOMES) == set()
    assert set(OUTCOMES) - declared == set()
    assert {outcome.kind for outcome in OUTCOMES.values()} == {HONOURED, REFUSED}


def test_the_engine_guide_lists_every_outcome():
    guide = (Path(__file__).resolve().parents[2] / "docs" / "engine.md").read_text()
    for name, outcome in OUTCOMES.items():
        assert f"| `--{name.replace('_', '-')}` | {outcome.kind} |" in guide, name


REFUSED_VALUES = {
    "nbest": 2, "score_reference": True, "prefix_size": 1, "constraints": "ordered",
    "diverse_beam_groups": 2, "diversity_rate": 0.5, "print_alignment": "hard",
    "lm_path": "lm.pt", "retain_dropout": True,
}


def test_refused_values_cover_every_refused_option():
    assert set(REFUSED_VALUES) == {n for n, o in OUTCOMES.items() if o.kind == REFUSED}


@pytest.mark.parametrize("name", sorted(REFUSED_VALUES))
@pytest.mark.parametrize("mode", ["spec-decoding", "deterministic"])
def test_refused_option_is_refused_in_one_line(models, name, mode):
    task, model = models["head post-norm sinusoidal separate"]
    options = (DecodingOptions(spec_decoding=True, k=2) if mode == "spec-decoding"
               else DecodingOptions(deterministic=True))
    config = generation_config(**{name: REFUSED_VALUES[name]})
    with pytest.raises(UserError) as err:
        build_decoder(model, task.target_dictionary, options, config,
                      fairseq_generator(task, model, config))
    message = str(err.value)
    assert "\n" not in message and "--" + name.replace("_", "-") in message


@pytest.mark.parametrize("options,refused", [
    (DecodingOptions(deterministic=True), "--deterministic"),
    (DecodingOptions(spec_decoding=True, k=2, beta=3, tau=1.0), "--spec-beta"),
    (DecodingOptions(spec_decoding=True, k=2, backend="onnxruntime", fused_draft=True),
     "--fused-draft"),
    (DecodingOptions(spec_decoding=True, k=2, backend="onnxruntime", int8=True), "--int8"),
])
def test_sampling_refuses_what_it_cannot_take_in_one_line(models, options, refused):
    task, model = models["head post-norm sinusoidal separate"]
    config = generation_config(sampling=True, sampling_topk=5)
    with pytest.raises(UserError) as err:
        build_decoder(model, task.target_dictionary, options, config,
                      fairseq_generator(task, model, config))
    assert "\n" not in str(err.value) and refused in str(err.value)


@pytest.mark.parametrize("argument", ["lm_model", "prefix_allowed_tokens_fn", "seq_gen_cls"])
def test_refused_generator_arguments(models, argument):
    task, model = models["head post-norm sinusoidal separate"]
    with pytest.raises(UserError, match=argument):
        build_decoder(model, task.target_dictionary, DecodingOptions(spec_decoding=True, k=2),
                      generation_config(), None, {argument: object()})


@pytest.mark.parametrize("name,value", [("temperature", 0.5), ("no_repeat_ngram_size", 2),
                                        ("match_source_len", True)])
def test_deterministic_refuses_what_its_replay_does_not_apply(models, name, value):
    task, model = models["head post-norm sinusoidal separate"]
    config = generation_config(**{name: value})
    with pytest.raises(UserError, match="--deterministic"):
        build_decoder(model, task.target_dictionary,
                      DecodingOptions(spec_decoding=True, k=2, deterministic=True), config)


def test_unnormalized_is_honoured_by_deterministic(models):
    task, model = models["head post-norm sinusoidal separate"]
    config = generation_config(unnormalized=True)
    sample = source_batch(task.source_dictionary, SOURCE_LENGTHS, seed=5)
    reference = fairseq_hypotheses(task, model, config, sample)
    generator = build_decoder(model, task.target_dictionary,
                              DecodingOptions(spec_decoding=True, k=2, deterministic=True),
                              config)
    ours = [hypos[0] for hypos in generator.generate([model], sample)]
    for a, b in zip(ours, reference):
        assert a["tokens"].tolist() == b["tokens"].tolist()
        assert float(a["score"]) == pytest.approx(float(b["score"]), abs=1e-4)


def test_no_repeat_ngram_size_1_is_refused(models):
    task, model = models["head post-norm sinusoidal separate"]
    with pytest.raises(UserError, match="no-repeat-ngram-size 1"):
        build_decoder(model, task.target_dictionary, DecodingOptions(spec_decoding=True, k=2),
                      generation_config(no_repeat_ngram_size=1))
