"""What every command line of the project shares: help that shows each option's
default, and old option names kept as deprecated aliases."""

from __future__ import annotations

import argparse
import logging

logger = logging.getLogger(__name__)


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help with ``(default: X)`` after every option that has a default
    worth reading (not None, not a switch's) and whose help does not already say it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or "default" in text or default is None
                or isinstance(default, bool) or default is argparse.SUPPRESS or default == []):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        return f"{text} (default: {shown})"


class _DeprecatedAlias(argparse.Action):
    """Stores into its option's destination and says, once, which name to use."""

    def __init__(self, option_strings, dest, replacement: str, **kwargs):
        self.replacement = replacement
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        logger.warning("%s is deprecated: use %s", option_string, self.replacement)
        setattr(namespace, self.dest, values)


def add_deprecated_alias(group, old: str, action: argparse.Action) -> None:
    """Accepts ``old`` for ``action``'s option (same type and destination), hidden
    from the help, with a warning naming the option's first spelling."""
    group.add_argument(old, dest=action.dest, type=action.type, metavar=action.metavar,
                       default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                       action=_DeprecatedAlias, replacement=action.option_strings[0])
