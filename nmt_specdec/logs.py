"""Logging of the command-line tools: quiet by default, loud with ``-v/--verbose``.

A command shows its progress bars, this project's own progress lines, warnings
and its summary. The libraries underneath log far more at INFO than a user can
act on: fairseq's task modules while they are imported ("Please install
tensorboardX"), ONNX Runtime's weight quantizer one line per matrix product
(about 680 in a quickstart). Their records below WARNING appear only with
``--verbose``.

fairseq (at DEBUG) and ONNX Runtime's quantizer call ``logging.basicConfig``
when their modules are imported. That call does nothing once the root logger
has a handler, so a command calls :func:`setup` before anything imports them;
:func:`quiet` covers library callers that never call :func:`setup`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import warnings
from typing import Iterator

# This project's loggers: their INFO lines are progress a user wants to see.
OWN_LOGGER = "nmt_specdec"
# A compile-time warning's "module" is its file's path without ".py".
LIBRARY_SOURCES = r".*[\\/]fairseq[\\/]"
VERBOSE_HELP = "also show the INFO logs of fairseq, ONNX Runtime and other libraries"

_verbose = False


class CurrentStderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record arrives: a handler bound
    to the stream of its creation would write to a closed stream once a caller
    (pytest's capture, a notebook) has swapped ``sys.stderr``."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


class _Formatter(logging.Formatter):
    """This project's INFO as plain lines (progress), its other records with their
    level; a library's records also name the library (whose warning is it?)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.name != OWN_LOGGER and not record.name.startswith(OWN_LOGGER + "."):
            return f"{record.levelname}: {record.name}: {text}"
        return text if record.levelno == logging.INFO else f"{record.levelname}: {text}"


def add_verbose_flag(parser: argparse.ArgumentParser) -> None:
    """Adds ``-v/--verbose`` (read back by :func:`setup`)."""
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)


def setup(verbose: bool = False) -> None:
    """Sends log records to stderr: WARNING and above from everyone, INFO from this
    project, and with ``verbose`` INFO from every library too.

    Safe to call again (e.g. once quiet before parsing the flags, once with
    ``--verbose`` after): it replaces its own handler and leaves others alone.
    """
    global _verbose
    _verbose = verbose
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, CurrentStderrHandler)]:
        root.removeHandler(handler)
    handler = CurrentStderrHandler()
    handler.setFormatter(_Formatter())
    root.addHandler(handler)
    # The root level filters every library whose logger has no level of its own;
    # fairseq's import-time basicConfig would otherwise have left it at DEBUG.
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    logging.getLogger(OWN_LOGGER).setLevel(logging.INFO)
    # Python 3.12 compiles fairseq's modules with "invalid escape sequence" warnings
    # (where no .pyc was written at install): about its source, not the user's run.
    # A verbose setup after a quiet one takes the filter back.
    warnings.filters[:] = [f for f in warnings.filters if not _hides_library_syntax(f)]
    if not verbose:
        warnings.filterwarnings("ignore", category=SyntaxWarning, module=LIBRARY_SOURCES)


def _hides_library_syntax(item: tuple) -> bool:
    """Whether a ``warnings.filters`` entry is the one :func:`setup` adds."""
    module = item[3]
    return item[2] is SyntaxWarning and getattr(module, "pattern", module) == LIBRARY_SOURCES


@contextlib.contextmanager
def quiet(*names: str) -> Iterator[None]:
    """Within the block, the named libraries' loggers drop records below WARNING,
    unless :func:`setup` was asked to be verbose.

    For chatty library calls made from library code too: without a command's
    :func:`setup`, a library that ran ``basicConfig(level=INFO)`` at import
    (ONNX Runtime's quantizer does) would print all of its INFO records.
    """
    if _verbose:
        yield
        return
    loggers = [logging.getLogger(name) for name in names]
    before = [logger.level for logger in loggers]
    for logger in loggers:
        if logger.level < logging.WARNING:  # NOTSET included: it defers to the root
            logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, before):
            logger.setLevel(level)
