"""Quiet by default, loud on request (:mod:`nmt_specdec.logs`).

Every console entry point of pyproject.toml prints only its help for ``--help``
(no library log line: fairseq logs while it is imported, and a command that
imports it before setting logging up prints "INFO:fairseq.tasks..." lines);
the libraries' INFO records appear only with ``--verbose``.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from nmt_specdec import logs

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
# "INFO:fairseq...", "WARNING: ...", "... | INFO | ...", "name [INFO] - ..." (ONNX
# Runtime's format) and Python's "UserWarning: ..."; not help text such as "INFO logs".
LOG_LINE = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)(:| \|)|\[(DEBUG|INFO|WARNING)\]"
                      r"|\w+Warning: ")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_help_prints_only_help(script: str) -> None:
    module, function = SCRIPTS[script].split(":")
    # What the console script's wrapper does, with --help as its arguments.
    proc = _run(f"import sys; from {module} import {function}; sys.argv[0] = {script!r}; "
                f"sys.exit({function}(['--help']))")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-2000:]
    assert "usage:" in proc.stdout
    logged = [line for line in output.splitlines() if LOG_LINE.search(line)]
    assert not logged, logged


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_module_runs_as_its_console_script(script: str) -> None:
    # `python -m MODULE` where console scripts are not installed (e.g. a GPU machine
    # given the package on PYTHONPATH): the same command, not a silent no-op.
    proc = subprocess.run([sys.executable, "-m", SCRIPTS[script].split(":")[0], "--help"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout


def test_library_info_is_shown_only_with_verbose() -> None:
    # fairseq's task modules log "Please install tensorboardX" at INFO while imported.
    code = "from nmt_specdec import logs; logs.setup({}); import fairseq.tasks"
    quiet, loud = _run(code.format(False)), _run(code.format(True))
    assert quiet.returncode == 0 and loud.returncode == 0, quiet.stderr + loud.stderr
    assert not [line for line in quiet.stderr.splitlines() if LOG_LINE.search(line)]
    assert "INFO: fairseq.tasks" in loud.stderr


def test_library_warnings_are_shown_only_with_verbose() -> None:
    # Python 3.12 warns "invalid escape sequence" while it compiles fairseq's modules
    # (where pip wrote no .pyc); Python names such a warning's module by its file. torch
    # warns about fairseq attention's mixed masks. Neither is about the user's run.
    code = ("from nmt_specdec import logs; logs.setup({}); import warnings\n"
            "for path in ('/site/fairseq/models/asr.py', '/home/me/mine.py'):\n"
            "    warnings.warn_explicit('invalid escape', SyntaxWarning, path, 1)\n"
            "warnings.warn('Support for mismatched key_padding_mask and attn_mask is "
            "deprecated.', UserWarning)\nwarnings.warn('your own', UserWarning)")
    # A command sets up quietly before it reads -v, then again with it.
    quiet, loud = _run(code.format(False)), _run(code.format("False); logs.setup(True"))
    assert "fairseq" not in quiet.stderr and "/home/me/mine.py:1: SyntaxWarning" in quiet.stderr
    assert "key_padding_mask" not in quiet.stderr and "your own" in quiet.stderr
    assert "/site/fairseq/models/asr.py:1: SyntaxWarning" in loud.stderr
    assert "UserWarning: Support for mismatched key_padding_mask" in loud.stderr


@pytest.fixture()
def restore_logging():
    root, own = logging.getLogger(), logging.getLogger(logs.OWN_LOGGER)
    saved = root.handlers[:], root.level, own.level
    yield
    logs.setup(verbose=False)  # forget a verbose setting; handlers and levels next
    root.handlers[:], level, own_level = saved
    root.setLevel(level)
    own.setLevel(own_level)


def test_own_progress_shown_library_info_hidden(capsys, restore_logging) -> None:
    logs.setup(verbose=False)
    logging.getLogger("nmt_specdec.data").getChild("x").info("step done")
    logging.getLogger("somelib").info("chatter")
    logging.getLogger("somelib").warning("trouble")
    err = capsys.readouterr().err
    assert "step done" in err and "chatter" not in err
    assert "WARNING: somelib: trouble" in err
    logs.setup(verbose=True)
    logging.getLogger("somelib").info("chatter")
    assert "INFO: somelib: chatter" in capsys.readouterr().err


def test_quiet_silences_a_library_that_configured_itself(capsys, restore_logging) -> None:
    # ONNX Runtime's quantizer runs basicConfig(level=INFO) at import: without a
    # command's setup its INFO lines would reach any handler on the root.
    handler = logging.StreamHandler(sys.stderr)
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    chatty = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    with logs.quiet("onnxruntime.quantization"):
        chatty.info("start to quantize /MatMul ...")
        chatty.warning("a real problem")
    chatty.info("after the block")
    err = capsys.readouterr().err
    assert "start to quantize" not in err
    assert "a real problem" in err and "after the block" in err


def test_readme_tables_script_prints_no_library_log() -> None:
    """The maintainers' table printer imports fairseq, which logs INFO lines as it
    loads: stderr stays empty, stdout has the table."""
    results = REPO_ROOT / "docs" / "results" / "gettext_main_amd.json"
    proc = subprocess.run([sys.executable, "scripts/readme_tables.py", str(results)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr == ""
    assert "| batch | decoder |" in proc.stdout
