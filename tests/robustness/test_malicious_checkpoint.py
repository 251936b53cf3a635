"""Hostile and broken checkpoint files are refused in one line, never run.

A checkpoint is a pickle, and a pickle can call any function while loading.
These tests hand fairseq (in-process and through its CLIs with our
``--user-dir``) checkpoints whose pickle would create a marker file, plus
truncated and non-checkpoint files, and check the user sees one ``error:``
line, exit status 2, no traceback, and that nothing ran.
"""

from __future__ import annotations

import builtins
import os
from pathlib import Path

import pytest
import torch

import fairseq_plugins  # noqa: F401  (installs the safe loader in this process)
from fairseq import checkpoint_utils
from nmt_specdec.errors import CheckpointError
from tests.helpers.fairseq_toy import PLUGINS_DIR, run_cli


class _ShellPayload:
    """Unpickles as ``os.system("touch <marker>")``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch '{self.marker}'",))


class _ExecPayload:
    """Unpickles as ``exec(<python that writes the marker>)``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (builtins.exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",))


# payload class -> the global its pickle names (os.system is posix.system).
PAYLOADS = {_ShellPayload: f"{os.system.__module__}.system", _ExecPayload: "builtins.exec"}


def _malicious_checkpoint(path: Path, marker: Path, payload: type = _ShellPayload) -> Path:
    """Saves a fairseq-shaped checkpoint whose unpickling would touch ``marker``."""
    state = {"model": {"w": torch.zeros(2)}, "cfg": None, "extra_state": payload(marker)}
    torch.save(state, path)
    return path


def _assert_one_line_error(proc, *needles: str) -> str:
    """Exit 2, no traceback, exactly one ``error:`` line holding ``needles``."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    for needle in needles:
        assert needle in errors[0]
    return errors[0]


@pytest.mark.parametrize("payload", list(PAYLOADS), ids=lambda p: p.__name__)
def test_fairseq_loader_refuses_code_in_pickle(tmp_path: Path, payload: type) -> None:
    marker = tmp_path / "pwned"
    ckpt = _malicious_checkpoint(tmp_path / "evil.pt", marker, payload)

    with pytest.raises(CheckpointError) as err:
        checkpoint_utils.load_checkpoint_to_cpu(str(ckpt))

    message = str(err.value)
    assert "\n" not in message
    assert str(ckpt) in message and f"'{PAYLOADS[payload]}'" in message
    assert not marker.exists()


def test_generate_cli_refuses_malicious_checkpoint(tmp_path: Path, toy_data_bin: Path) -> None:
    marker = tmp_path / "pwned"
    ckpt = _malicious_checkpoint(tmp_path / "evil.pt", marker)

    proc = run_cli(
        "generate",
        [toy_data_bin, "--path", ckpt, "--cpu", "--user-dir", PLUGINS_DIR],
        check=False,
    )

    line = _assert_one_line_error(proc, str(ckpt), f"'{PAYLOADS[_ShellPayload]}'", "allowlist")
    assert line.startswith("error: refusing to load checkpoint")
    assert not marker.exists()
    assert "H-" not in proc.stdout


def test_interactive_cli_rejects_truncated_checkpoint(
    tmp_path: Path, toy_data_bin: Path, tiny_transformer_ckpt: Path
) -> None:
    data = tiny_transformer_ckpt.read_bytes()
    ckpt = tmp_path / "truncated.pt"
    ckpt.write_bytes(data[: len(data) // 2])

    proc = run_cli(
        "interactive",
        [toy_data_bin, "--path", ckpt, "--cpu", "--source-lang", "src", "--target-lang", "tgt",
         "--user-dir", PLUGINS_DIR],
        stdin="a b c\n", check=False,
    )

    _assert_one_line_error(proc, str(ckpt), "truncated")


@pytest.mark.parametrize(
    "content",
    [b"", b"this is a text file, not a checkpoint\n", b"PK\x03\x04" + b"\x00" * 40],
    ids=["empty", "text", "zip-header-only"],
)
def test_fairseq_loader_rejects_non_checkpoint(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "not_a_checkpoint.pt"
    path.write_bytes(content)

    with pytest.raises(CheckpointError) as err:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))

    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"cannot load checkpoint {path}: it is truncated, corrupt or not")


def test_fairseq_loader_reports_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.pt"

    with pytest.raises(CheckpointError, match=r"^cannot read checkpoint .*nowhere\.pt: No such file"):
        checkpoint_utils.load_checkpoint_to_cpu(str(missing))
