"""Glue: fairseq's CLIs load checkpoints safely once they import this plugin.

fairseq imports ``--user-dir`` before it loads any checkpoint, and
``__init__.py`` imports this module first, so every load of the process goes
through nmt_specdec's safe loader and its failures print as one line. The
work is in :mod:`nmt_specdec.checkpoints`.
"""

from nmt_specdec import checkpoints


def install() -> None:
    """Safe loading and one-line user errors for the process (idempotent)."""
    checkpoints.install_safe_loading()
    checkpoints.install_one_line_errors()


install()
