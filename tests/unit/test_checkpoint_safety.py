"""The allowlist loader (nmt_specdec.checkpoint_safety) and its fairseq glue."""

from __future__ import annotations

import argparse
import collections
import datetime
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from nmt_specdec.checkpoint_safety import fairseq_checkpoint_globals, load_checkpoint
from nmt_specdec.errors import CheckpointError, UserError
from tests.helpers.fairseq_toy import REPO_ROOT


def _names(entries: list) -> set[str]:
    """``module.name`` of each allowlist entry (aliases by their alias)."""
    return {e[1] if isinstance(e, tuple) else f"{e.__module__}.{e.__name__}" for e in entries}


def _fairseq_like_state() -> dict:
    """The shapes of a legacy-flag, ``--eval-bleu`` fairseq checkpoint."""
    meters = [(10, "_bleu_counts", "AverageMeter", {"val": np.array([5, 3], dtype=np.int64)}),
              (10, "_bleu_totals", "AverageMeter", {"val": np.array([9.0, 8.0])})]
    return {
        "args": None,
        "cfg": {"model": argparse.Namespace(arch="transformer", encoder_layers=1)},
        "model": collections.OrderedDict(w=torch.ones(2, 3)),
        "extra_state": {"metrics": collections.OrderedDict(valid=meters), "best": 4.5},
    }


def test_allowlist_is_exactly_the_reviewed_set() -> None:
    """Widening the allowlist is a security decision: change this test with it."""
    assert _names(fairseq_checkpoint_globals()) == {
        "argparse.Namespace",
        "numpy.ndarray",
        "numpy._core.multiarray._reconstruct",
        "numpy.core.multiarray._reconstruct",
        "numpy.dtype",
        "numpy.dtypes.Int64DType",
        "numpy.dtypes.Float64DType",
    }


def test_loads_real_fairseq_checkpoint(tiny_transformer_ckpt: Path) -> None:
    state = load_checkpoint(tiny_transformer_ckpt)

    assert isinstance(state["cfg"]["model"], argparse.Namespace)
    assert all(torch.is_tensor(v) for v in state["model"].values())
    assert state["optimizer_history"][-1]["num_updates"] == 20
    meters = {m[1]: m[3] for m in state["extra_state"]["metrics"]["valid"]}
    assert isinstance(meters["_bleu_counts"]["sum"], np.ndarray)  # --eval-bleu's arrays


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_loads_fairseq_shaped_state_from_path_and_file(tmp_path: Path, zip_format: bool) -> None:
    path = tmp_path / "ckpt.pt"
    torch.save(_fairseq_like_state(), path, _use_new_zipfile_serialization=zip_format)

    from_path = load_checkpoint(path)
    with open(path, "rb") as handle:
        from_file = load_checkpoint(handle)

    for state in (from_path, from_file):
        assert state["cfg"]["model"].encoder_layers == 1
        counts = state["extra_state"]["metrics"]["valid"][0][3]["val"]
        assert counts.dtype == np.int64 and counts.tolist() == [5, 3]


def test_loads_numpy1_era_checkpoint(tmp_path: Path) -> None:
    """Files saved under numpy 1.x name the array reconstructor numpy.core.*."""
    new, old = tmp_path / "np2.pt", tmp_path / "np1.pt"
    torch.save({"a": np.arange(3)}, new)
    with zipfile.ZipFile(new) as src, zipfile.ZipFile(old, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename.endswith("data.pkl"):
                data = data.replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n")
                assert b"numpy.core.multiarray\n" in data
            dst.writestr(item, data)

    assert load_checkpoint(old)["a"].tolist() == [0, 1, 2]


def test_refuses_global_outside_allowlist_and_names_it(tmp_path: Path) -> None:
    path = tmp_path / "date.pt"
    torch.save({"model": {}, "extra": datetime.date(2024, 1, 1)}, path)

    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)

    assert str(err.value) == (
        f"refusing to load checkpoint {path}: it contains the global 'datetime.date', "
        "which is not on the allowlist of fairseq checkpoint types"
    )
    assert isinstance(err.value, UserError)


def test_refuses_unlisted_numpy_dtype(tmp_path: Path) -> None:
    """Types reached through an allowed call (dtype classes) are named too."""
    path = tmp_path / "f16.pt"
    torch.save({"a": np.zeros(2, dtype=np.float16)}, path)

    with pytest.raises(CheckpointError, match=r"'numpy\.dtypes\.Float16DType'"):
        load_checkpoint(path)


def test_allowlist_does_not_leak_into_process(tmp_path: Path) -> None:
    """The allowlist applies inside our loader only, never process-wide."""
    path = tmp_path / "ckpt.pt"
    torch.save(_fairseq_like_state(), path)
    # torch keeps the process-wide allowlist in a set: compare contents, not order.
    before = set(torch.serialization.get_safe_globals())

    load_checkpoint(path)

    assert set(torch.serialization.get_safe_globals()) == before
    with pytest.raises(Exception, match="Weights only load failed"):
        torch.load(path, weights_only=True)


def test_fairseq_glue_keeps_fairseq_postprocessing(tiny_transformer_ckpt: Path) -> None:
    """The patched load_checkpoint_to_cpu still applies overrides and OmegaConf."""
    import fairseq_plugins  # noqa: F401
    from fairseq import checkpoint_utils
    from omegaconf import DictConfig

    state = checkpoint_utils.load_checkpoint_to_cpu(
        str(tiny_transformer_ckpt), arg_overrides={"beam": 7}
    )

    assert isinstance(state["cfg"], DictConfig)
    assert state["cfg"].generation.beam == 7
    # Installing twice (re-import, several --user-dir loads) wraps only once.
    wrapped = checkpoint_utils.load_checkpoint_to_cpu
    fairseq_plugins.checkpoint_safety.install()
    assert checkpoint_utils.load_checkpoint_to_cpu is wrapped


def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=300)


def test_excepthook_prints_user_error_as_one_line() -> None:
    proc = _run_python(
        "import fairseq_plugins\n"
        "from nmt_specdec.errors import UserError\n"
        "print('partial output')\n"
        "raise UserError('bad --flag\\nsecond line')\n"
    )

    assert proc.returncode == 2
    assert proc.stdout == "partial output\n"
    assert proc.stderr.splitlines()[-1] == "error: bad --flag second line"
    assert "Traceback" not in proc.stderr


def test_excepthook_leaves_other_errors_alone() -> None:
    proc = _run_python("import fairseq_plugins\nraise ValueError('a bug')\n")

    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "ValueError: a bug" in proc.stderr
