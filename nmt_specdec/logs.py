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
import os
import sys
import warnings
from typing import Iterator

# This project's loggers: their INFO lines are progress a user wants to see.
OWN_LOGGER = "nmt_specdec"
# A compile-time warning's "module" is its file's path without ".py".
LIBRARY_SOURCES = r".*[\\/]fairseq[\\/]"
# torch on fairseq's attention, which passes a boolean padding mask beside a float
# causal mask (the verifier's states pass of nmt-specdec-add-draft-head).
_LIBRARY_USE_MESSAGES = (r"Support for mismatched key_padding_mask and attn_mask",)
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
    # (where no .pyc was written at install): about its source, not the user's run;
    # so are torch's warnings about how fairseq calls it. A verbose setup after a
    # quiet one takes the filters back.
    warnings.filters[:] = [f for f in warnings.filters if not _is_quiet_filter(f)]
    if not verbose:
        warnings.filterwarnings("ignore", category=SyntaxWarning, module=LIBRARY_SOURCES)
        for message in _LIBRARY_USE_MESSAGES:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)


# What fairseq's generation CLIs print on stderr through libraries, about fairseq's
# own use of them (hydra's deprecations, torch's pin_memory on a CPU), never the user's.
_LIBRARY_NOISE = (r"hydra\.", r"torch\.utils\.data")
_LIBRARY_NOISE_MESSAGES = (r"\s*'config' is validated against ConfigStore",)
# fairseq's own knob for its CLIs' log level; set, nothing is hidden.
FAIRSEQ_LOGLEVEL = "LOGLEVEL"


def quiet_fairseq_generation() -> None:
    """fairseq-generate and fairseq-interactive with the plugin: WARNING and above
    from fairseq and the libraries, this project's INFO (its summary), the lines
    of fairseq-generate itself but its config dump (throughput: "Translated N
    sentences ..."), and none of the warnings fairseq's use of hydra and torch
    raises. ``LOGLEVEL=INFO`` (as fairseq reads it) shows everything again."""
    if os.environ.get(FAIRSEQ_LOGLEVEL):
        return
    logging.getLogger().setLevel(logging.WARNING)
    for name in (OWN_LOGGER, "fairseq_plugins", "fairseq_cli.generate"):
        logging.getLogger(name).setLevel(logging.INFO)
    logging.getLogger("fairseq_cli.generate").addFilter(_not_a_config_dump)
    for module in _LIBRARY_NOISE:
        warnings.filterwarnings("ignore", category=UserWarning, module=module)
    for message in _LIBRARY_NOISE_MESSAGES:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)


def _not_a_config_dump(record: logging.LogRecord) -> bool:
    """fairseq's CLIs log their whole config as the record's message object."""
    return isinstance(record.msg, str)


def _is_quiet_filter(item: tuple) -> bool:
    """Whether a ``warnings.filters`` entry is one that a quiet :func:`setup` adds."""
    _, message, category, module, _ = item
    if category is SyntaxWarning:
        return getattr(module, "pattern", module) == LIBRARY_SOURCES
    return category is UserWarning and getattr(message, "pattern", message) in _LIBRARY_USE_MESSAGES


def verbose() -> bool:
    """Whether :func:`setup` was asked to show the libraries' INFO logs."""
    return _verbose


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
