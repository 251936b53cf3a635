"""``fairseq-interactive`` with ``translation_specdec``: an H- line per input line.

Stock fairseq aborts the run on a line longer than the model's source
positions ("Size of sample #N is invalid"), or drops it with
``--skip-invalid-size-inputs-valid-test``, and dies on invalid UTF-8 on stdin.
Our task truncates such a line with a warning naming it and decodes invalid
bytes as U+FFFD (see ``fairseq_plugins/inference_inputs.py``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch
from fairseq.data import Dictionary
from fairseq.tasks.translation import TranslationConfig, TranslationTask

import fairseq_plugins  # noqa: F401
from fairseq_plugins.specdec_task import (
    TranslationSpecDecConfig,
    TranslationSpecDecTask,
)
from tests.helpers.fairseq_toy import PLUGINS_DIR
from tests.robustness.test_invalid_options import one_error_line  # noqa: F401
from tests.robustness.toy_models import (
    HOSTILE_INVALID_LINE,
    HOSTILE_LONG_LINE,
    MAX_SOURCE_POSITIONS,
    hostile_lines,
)


def _task(cls, cfg_cls):
    dictionary = Dictionary()
    for symbol in "abcdefgh":
        dictionary.add_symbol(symbol)
    return cls(cfg_cls(source_lang="src", target_lang="tgt"), dictionary, dictionary)


def _batches(task, lengths, max_positions):
    eos = task.source_dictionary.eos()
    tokens = [torch.tensor([5] * (n - 1) + [eos]) for n in lengths]
    dataset = task.build_dataset_for_inference(tokens, [t.numel() for t in tokens])
    itr = task.get_batch_iterator(
        dataset,
        max_sentences=2,
        max_positions=max_positions,
        ignore_invalid_inputs=False,
    )
    return list(itr.next_epoch_itr(shuffle=False))


def test_stock_task_refuses_an_over_long_line() -> None:
    task = _task(TranslationTask, TranslationConfig)
    with pytest.raises(Exception, match="Size of sample #1 is invalid"):
        _batches(task, [3, 40, 5], (16, 16))


TRUNCATED = "exceed the model's 16 source positions; truncated to the first 15"


def test_specdec_task_truncates_over_long_lines_in_place(caplog) -> None:
    task = _task(TranslationSpecDecTask, TranslationSpecDecConfig)
    _batches(task, [2, 2], (16, 16))  # an earlier buffer of 2 lines

    batches = _batches(task, [3, 40, 5, 16, 17], (16, 16))

    rows = {}
    for batch in batches:
        src = batch["net_input"]["src_tokens"]
        for i, sid in enumerate(batch["id"].tolist()):
            rows[sid] = src[i][src[i].ne(task.source_dictionary.pad())].tolist()
    eos = task.source_dictionary.eos()
    assert sorted(rows) == [0, 1, 2, 3, 4]
    assert [len(rows[i]) for i in range(5)] == [3, 16, 5, 16, 16]
    assert all(row[-1] == eos for row in rows.values())
    warnings = [
        r.getMessage() for r in caplog.records if "source positions" in r.getMessage()
    ]
    # Line numbers continue across calls: this buffer starts at input line 3.
    assert warnings == [
        f"input line 4: 40 tokens {TRUNCATED}",
        f"input line 7: 17 tokens {TRUNCATED}",
    ]


def test_interactive_spec_decoding_on_hostile_stdin(raw_text_toy) -> None:
    cmd = [
        sys.executable,
        "-m",
        "fairseq_cli.interactive",
        str(raw_text_toy.data),
        "--path",
        str(raw_text_toy.specdec),
        "--user-dir",
        str(PLUGINS_DIR),
        "--task",
        "translation_specdec",
        "--spec-decoding",
        "-s",
        "src",
        "-t",
        "tgt",
        "--bpe",
        "sentencepiece",
        "--sentencepiece-model",
        str(raw_text_toy.spm_model),
        "--cpu",
        "--max-len-b",
        "6",
        "--batch-size",
        "3",
        "--buffer-size",
        "4",
    ]
    stdin = b"".join(line + b"\n" for line in hostile_lines())
    # A UTF-8 locale makes Python's stdin strict: the task must relax it.
    env = dict(os.environ, LC_ALL="C.UTF-8", PYTHONIOENCODING="")

    proc = subprocess.run(cmd, input=stdin, capture_output=True, env=env, timeout=300)

    out = proc.stdout.decode("utf-8", errors="replace")
    err = proc.stderr.decode("utf-8", errors="replace")
    assert proc.returncode == 0, err[-3000:]
    ids = [int(m) for m in re.findall(r"^H-(\d+)\t", out, flags=re.M)]
    assert ids == list(range(len(hostile_lines())))
    assert "Traceback" not in err
    logs = out + err
    assert f"input line {HOSTILE_INVALID_LINE}: invalid UTF-8 bytes replaced" in logs
    assert re.search(
        rf"input line {HOSTILE_LONG_LINE}: \d+ tokens exceed the model's "
        rf"{MAX_SOURCE_POSITIONS} "
        "source positions; truncated",
        logs,
    )
    assert len(re.findall(r"input line \d+:", logs)) == 2
