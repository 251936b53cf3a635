"""Decoding options are declared once, parsed once, and never guessed at.

Read from the source with ``ast`` (nothing is imported but the declaration):

- no ``getattr(cfg, name, default)`` / ``getattr(args, name, default)`` in
  ``nmt_specdec`` or ``fairseq_plugins``: a second copy of a default hides a
  missing field. fairseq's own idiom stays where fairseq puts it: inside
  ``@register_model_architecture`` functions (and helpers only they call);
- each decoding option is a dataclass field of ``DecodingOptions`` and of no
  other dataclass; the fairseq task's config and the translate command derive
  theirs from it;
- ``--spec-k``'s text is read by ``parse_spec_k`` alone.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("nmt_specdec", "fairseq_plugins")
ARCHITECTURE_DECORATOR = "register_model_architecture"
# Fields named like a decoding option that mean something else.
NOT_DECODING_OPTIONS = {
    # nmt-specdec-evaluate's --int8/--fused-draft add rows (the onnxruntime rows again
    # with the option on); each row decodes with its own DecodingOptions.
    ("EvalConfig", "int8"), ("EvalConfig", "fused_draft"),
    # nmt-specdec-evaluate attaches --draft-head once, when it loads the model that
    # every row (stock, CTranslate2, half-precision copies) decodes from.
    ("EvalConfig", "draft_head"),
    # The draft block size a new head is trained for, not a decoding option.
    ("AddHeadConfig", "k"),
    # The refinement count a new head records as its default (a decoder overrides it
    # with DecodingOptions.refine_steps).
    ("AddHeadConfig", "refine_steps"),
}


def _modules() -> Iterator[Tuple[Path, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT), ast.parse(path.read_text(encoding="utf-8"))


def _functions(tree: ast.Module) -> List[ast.FunctionDef]:
    return [node for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _decorator_names(function: ast.FunctionDef) -> Set[str]:
    names = set()
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        names.add(target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", ""))
    return names


def _fairseq_idiom(tree: ast.Module) -> Set[str]:
    """Architecture functions and the module functions only they call."""
    functions = _functions(tree)
    architectures = {f.name for f in functions if ARCHITECTURE_DECORATOR in _decorator_names(f)}
    callers: Dict[str, Set[str]] = {}
    for function in functions:
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                callers.setdefault(node.func.id, set()).add(function.name)
    helpers = {name for name, by in callers.items() if by and by <= architectures}
    return architectures | helpers


def _names_cfg_or_args(node: ast.expr) -> bool:
    """``cfg``, ``args``, ``self.cfg``, ``self.args``."""
    if isinstance(node, ast.Name):
        return node.id in ("cfg", "args")
    return (isinstance(node, ast.Attribute) and node.attr in ("cfg", "args")
            and isinstance(node.value, ast.Name) and node.value.id == "self")


def _guessing_getattrs(tree: ast.Module) -> Iterator[Tuple[str, ast.Call]]:
    idiom = _fairseq_idiom(tree)
    for function in _functions(tree):
        if function.name in idiom:
            continue
        for node in ast.walk(function):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "getattr" and len(node.args) == 3
                    and _names_cfg_or_args(node.args[0])):
                yield function.name, node


def test_no_getattr_with_a_default_on_cfg_or_args() -> None:
    found = [f"{path}:{node.lineno} in {name}(): {ast.unparse(node)}"
             for path, tree in _modules() for name, node in _guessing_getattrs(tree)]
    assert found == []


def test_the_rule_sees_a_guess_and_spares_fairseqs_idiom() -> None:
    tree = ast.parse(
        "def build(cfg):\n    return getattr(cfg, 'spec_k', None)\n"
        "def _defaults(args):\n    args.x = getattr(args, 'x', 1)\n"
        "@register_model_architecture('m', 'a')\n"
        "def arch(args):\n    _defaults(args)\n    args.y = getattr(args, 'y', 2)\n"
        "class T:\n    def b(self):\n        return getattr(self.cfg, 'z', 3)\n")
    assert [name for name, _ in _guessing_getattrs(tree)] == ["build", "b"]


def _dataclass_fields(tree: ast.Module) -> Iterator[Tuple[str, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
                "dataclass" in ast.unparse(d) for d in node.decorator_list):
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target,
                                                                       ast.Name):
                    yield node.name, statement.target.id


def test_each_decoding_option_is_declared_in_one_class() -> None:
    from nmt_specdec.decoding.options import DecodingOptions, flag_names

    options = {f.name for f in dataclasses.fields(DecodingOptions)} | set(flag_names())
    declared: Dict[str, Set[str]] = {}
    for _, tree in _modules():
        for owner, name in _dataclass_fields(tree):
            if name in options and (owner, name) not in NOT_DECODING_OPTIONS:
                declared.setdefault(name, set()).add(owner)
    assert declared == {name: {"DecodingOptions"}
                        for name in (f.name for f in dataclasses.fields(DecodingOptions))}


def test_every_option_has_help_and_the_task_config_derives_its_flags() -> None:
    import fairseq_plugins  # noqa: F401  (registers the task)
    from fairseq_plugins.specdec_task import TranslationSpecDecConfig
    from nmt_specdec.decoding.options import DecodingOptions, flag_fields

    assert all(f.metadata["help"] for f in dataclasses.fields(DecodingOptions))
    task_fields = {f.name: f for f in dataclasses.fields(TranslationSpecDecConfig)}
    for name, kind, made in flag_fields():
        assert task_fields[name].type == kind
        assert task_fields[name].default == made.default
        assert task_fields[name].metadata["help"] == made.metadata["help"]


def _compares_with_auto(node: ast.AST) -> bool:
    if not isinstance(node, ast.Compare):
        return False
    operands = [node.left, *node.comparators]
    return any((isinstance(o, ast.Constant) and o.value == "auto")
               or (isinstance(o, ast.Name) and o.id == "AUTO") for o in operands)


def test_spec_k_is_parsed_in_one_function() -> None:
    """Only ``parse_spec_k`` tells ``auto`` from a number (``--backend auto`` is
    another option: the backends are left out), only ``from_flags`` and argparse's
    check of the flag call it, and nothing reads a ``spec_k`` attribute."""
    readers, callers, attributes = set(), set(), []
    for path, tree in _modules():
        for function in _functions(tree):
            for node in ast.walk(function):
                if _compares_with_auto(node) and "backends" not in path.parts:
                    readers.add(f"{path.name}:{function.name}")
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id == "parse_spec_k"):
                    callers.add(f"{path.name}:{function.name}")
        attributes += [f"{path}:{node.lineno}" for node in ast.walk(tree)
                       if isinstance(node, ast.Attribute) and node.attr == "spec_k"]
    assert readers == {"options.py:parse_spec_k"}
    assert callers == {"options.py:from_flags", "options.py:_spec_k_flag"}
    assert attributes == []
