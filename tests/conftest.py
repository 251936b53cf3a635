"""Shared pytest setup: import path and session-wide tiny fairseq models.

The fixtures here train once per test session and are shared by every test
that needs a real fairseq checkpoint, which keeps ``make test`` fast.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `tests.helpers`, `benchmarks` and the packages, uninstalled
    sys.path.insert(0, str(REPO_ROOT))

from tests.helpers.fairseq_toy import binarize, make_toy_data, train_tiny  # noqa: E402
from tests.helpers.specdec_toy import SpecDecToy, train_specdec_toy  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """One thread per test process where pytest-xdist runs several workers (one
    per core, `make test`): each worker's torch and ONNX Runtime calls, and the
    command-line tools the tests start, would otherwise spin threads on every
    core at once and wait on each other. An ``OMP_NUM_THREADS`` set by the user
    is kept."""
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1 \
            and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


# --eval-bleu makes fairseq keep numpy arrays among the saved meters, so the
# shared checkpoint exercises every entry of the checkpoint allowlist.
EVAL_BLEU_ARGS = ("--eval-bleu", "--eval-bleu-args", '{"beam": 1}')


@pytest.fixture(scope="session")
def toy_data_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Binarized toy reversal data (500 train pairs; src -> tgt)."""
    root = tmp_path_factory.mktemp("toy")
    raw = make_toy_data(root / "raw", n=500, seed=0)
    return binarize(raw, root / "data-bin")


@pytest.fixture(scope="session")
def tiny_transformer_ckpt(tmp_path_factory: pytest.TempPathFactory, toy_data_bin: Path) -> Path:
    """``checkpoint_last.pt`` of a stock 1-layer ``transformer``, 20 CPU updates.

    Trained with legacy flags and ``--eval-bleu``, i.e. it holds an
    ``argparse.Namespace`` and numpy arrays besides tensors. Treat it as
    read-only; copy its directory to continue training from it.
    """
    save_dir = tmp_path_factory.mktemp("tiny_transformer")
    return train_tiny(toy_data_bin, save_dir, extra_args=EVAL_BLEU_ARGS)


@pytest.fixture(scope="session")
def specdec_toy(tmp_path_factory: pytest.TempPathFactory) -> SpecDecToy:
    """A ``specdec_transformer_tiny`` (d=64, 2+2 layers, 1 draft layer, K=4)
    trained jointly for 600 CPU updates (~50 s of CPU) on a copy task over 12
    symbols: 3000 train / 100 valid / 200 test pairs.

    Fields: ``raw_dir``, ``data_bin``, ``checkpoint`` (``checkpoint_last.pt``),
    ``train_log`` (JSON log lines, see ``records()``), ``decode_args()``.
    Treat it as read-only; copy its checkpoint directory to continue training.
    """
    return train_specdec_toy(tmp_path_factory.mktemp("specdec_toy"))


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory):
    """ONNX exports of the requesting module go to a fresh cache (not the user's)."""
    root = tmp_path_factory.mktemp("onnx_cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("NMT_SPECDEC_ONNX_CACHE", str(root))
    yield root
    patch.undo()


_REPORT: list = []  # lines that tests report (measured, not asserted), printed at the end


def report_line(line: str) -> None:
    """Adds a line to the run's summary (e.g. how far bf16 greedy is from fp32)."""
    _REPORT.append(line)


def pytest_sessionfinish(session) -> None:
    """In a pytest-xdist worker, hands the reported lines to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["report_lines"] = list(_REPORT)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist's controller: collects a finished worker's reported lines."""
    _REPORT.extend(getattr(node, "workeroutput", {}).get("report_lines", []))


def pytest_terminal_summary(terminalreporter) -> None:
    for line in _REPORT:
        terminalreporter.write_line(line)
