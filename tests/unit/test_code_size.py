"""Small modules and short functions (the project's style guide): no module of the
package or the plugin over 400 lines, no function over 60, no line over 110
characters. Tests are exempt."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for package in ("nmt_specdec", "fairseq_plugins")
                 for p in (ROOT / package).rglob("*.py"))


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", SOURCES, ids=_name)
def test_module_and_functions_are_small(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 400, f"{_name(path)}: {len(lines)} lines"
    long_lines = [i for i, line in enumerate(lines, 1) if len(line) > 110]
    assert not long_lines, f"{_name(path)}: lines over 110 characters: {long_lines}"
    long_functions = [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > 60]
    assert not long_functions, f"{_name(path)}: functions over 60 lines: {long_functions}"


def test_sources_were_found() -> None:
    assert len(SOURCES) > 50
