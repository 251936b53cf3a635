"""The shipped model, as the real-model tests see it: the one place that names it.

It is the quickstart's default model; the directory is named here on its own,
not taken from the quickstart's code, so that ``test_shipped_model`` can check
that ``make quickstart`` really decodes it. Its test split is prepared by the
quickstart's own code path (``prepare_test_split``: for the gettext model, only
its held-out packages).

Preparing the test data needs the network on first use (``apt-get download``
of Debian packages). Only a genuinely missing network
or apt (:class:`~nmt_specdec.data.steps.SourceUnavailable`) skips a test; any
other failure of the preparation is a bug and fails the test with a clear
message, so that a real-model test cannot quietly turn into a skip.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import List

import pytest
from fairseq.dataclass.configs import GenerationConfig
import torch

from nmt_specdec.workflows.quickstart_pretrained import prepare_test_split

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO_ROOT / "models" / "gettext-de-en-tiny"
HAND_WRITTEN = Path(__file__).resolve().parent / "de_sentences.txt"  # 40, no network needed
SETTINGS = json.loads((MODEL_DIR / "settings.json").read_text(encoding="utf-8"))


def load_model():
    """``(model, task)``: the shipped checkpoint through the safe loader, eval mode."""
    import fairseq_plugins  # noqa: F401  (safe loader, task and model registration)
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(MODEL_DIR / "model.pt")], arg_overrides={"data": str(MODEL_DIR)})
    return models[0].eval(), task


def split_lines(out: Path, count: int) -> List[str]:
    """The first ``count`` source lines of the shipped model's test split.

    Skips only when the data source is unreachable (no network, no apt-get);
    fails, naming the error, for anything else.
    """
    from nmt_specdec.data.steps import SourceUnavailable

    where = SimpleNamespace(work=out, deb_dir=None, ding_file=None)
    try:
        raw_dir, _ = prepare_test_split(where, MODEL_DIR)
    except SourceUnavailable as exc:
        pytest.skip(f"test data unreachable (network or apt-get unavailable): {exc}")
    except Exception as exc:  # a bug in the recipe, not a missing network
        pytest.fail(f"preparing the test split failed ({type(exc).__name__}: {exc}); "
                    "this is not a network problem, so the real-model tests fail")
    lines = (raw_dir / "test.de").read_text(encoding="utf-8").splitlines()
    if len(lines) < count:
        pytest.fail(f"the test split has {len(lines)} lines, the tests need {count}")
    return lines[:count]


def encoded_split(out: Path, count: int, task) -> List[torch.Tensor]:
    """:func:`split_lines`, encoded with the model's SentencePiece model and dictionary."""
    import sentencepiece

    spm = sentencepiece.SentencePieceProcessor(model_file=str(MODEL_DIR / "spm.model"))
    return [task.source_dictionary.encode_line(" ".join(spm.encode(line, out_type=str)),
                                               add_if_not_exist=False)
            for line in split_lines(out, count)]


def hand_written_sources(task, count: int = 40) -> List[torch.Tensor]:
    """The first ``count`` hand-written German sentences, encoded for the shipped model."""
    import sentencepiece

    spm = sentencepiece.SentencePieceProcessor(model_file=str(MODEL_DIR / "spm.model"))
    lines = HAND_WRITTEN.read_text(encoding="utf-8").splitlines()[:count]
    return [task.source_dictionary.encode_line(" ".join(spm.encode(line, out_type=str)),
                                               add_if_not_exist=False) for line in lines]


def decode_all(generator, model, task, sources, batch_size: int,
               scores: bool = False) -> list:
    """Decode encoded ``sources`` in batches of ``batch_size``; token lists in input
    order (``scores``: ``(tokens, positional scores)`` pairs)."""
    dataset = task.build_dataset_for_inference(sources, [len(s) for s in sources])
    outputs = {}
    for start in range(0, len(sources), batch_size):
        batch = dataset.collater([dataset[i] for i in range(start, min(start + batch_size,
                                                                       len(sources)))])
        for i, hyps in zip(batch["id"].tolist(), generator.generate([model], batch)):
            tokens = hyps[0]["tokens"].tolist()
            outputs[i] = (tokens, hyps[0]["positional_scores"]) if scores else tokens
    return [outputs[i] for i in range(len(sources))]


def assert_same_decoding(ours, theirs, model, task, sources) -> None:
    """Two generators give the same tokens and take the same iterations, sentence
    by sentence at batch 1 (e.g. a graph backend against the torch passes)."""
    dataset = task.build_dataset_for_inference(sources, [len(s) for s in sources])
    for index in range(len(sources)):
        sample = dataset.collater([dataset[index]])
        a, b = (g.generate([model], sample)[0][0] for g in (ours, theirs))
        assert torch.equal(a["tokens"], b["tokens"]), index
        assert a["iterations"] == b["iterations"], index


def shipped_generator(model, task, k: int = 0, candidates: int = 1, backend=None,
                      options=None, loop=None, **lengths):
    """The engine's generator for the shipped model with its length rules
    (``k`` 0: greedy; ``candidates`` > 1: draft trees; ``backend`` None: torch;
    ``options``: a whole ``DecodingOptions`` instead of ``k`` and ``candidates``;
    ``loop``: the loop of every batch (None: the generator's choice);
    ``lengths``: ``min_len``, ``max_len_a`` or ``max_len_b`` instead of the model's)."""
    from nmt_specdec.decoding.generator import SpecDecGenerator
    from nmt_specdec.decoding.options import DecodingOptions, LengthRules

    rules = LengthRules.from_generation_args(GenerationConfig(**{
        "min_len": 1, "unkpen": 0.0, "lenpen": 1.0, "max_len_a": SETTINGS["max_len_a"],
        "max_len_b": SETTINGS["max_len_b"], **lengths}), model)
    options = options or DecodingOptions(k=k, candidates=candidates)
    return SpecDecGenerator(model, task.target_dictionary, options, rules, backend=backend,
                            loop=loop)


def onnx_greedy():
    """The shipped model on ONNX Runtime (one thread), its hand-written sources and
    their greedy output at batch 1: ``(model, task, backend, sources, greedy)``."""
    from nmt_specdec.decoding.backends import make_backend

    torch.set_num_threads(1)
    model, task = load_model()
    backend = make_backend("onnxruntime", model, task.target_dictionary)
    sources = hand_written_sources(task)
    greedy = decode_all(shipped_generator(model, task, backend=backend), model, task, sources, 1)
    return model, task, backend, sources, greedy
