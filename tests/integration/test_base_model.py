"""The shipped Transformer-base model (``models/gettext-de-en-base``): its files.

Fast checks a broken shard, index, card, export or head would fail: every file
matches the sha256 that settings.json and the card record, and none is over
git's 50 MB; the shards join (in a copy, so the checkout's joined file is not
what is tested) into the checkpoint the index names; the joined verifier is a
stock ``transformer`` that plain fairseq loads with ``weights_only=True`` and
no plugin; the head attaches to it (its verifier fingerprint matches); and
``nmt-specdec-translate`` without ``--checkpoint`` translates with it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nmt_specdec import model_shards, shipped_models
from nmt_specdec.hashing import file_sha256

BASE = shipped_models.BASE
SETTINGS = json.loads((BASE / "settings.json").read_text(encoding="utf-8"))
GIT_FILE_LIMIT = 50 * 10**6


def test_the_default_model_is_the_base_model() -> None:
    assert shipped_models.DEFAULT == BASE
    assert SETTINGS["draft_head"] == "head.pt" and SETTINGS["sharded"] == "model.pt.index.json"


def test_files_match_recorded_sha256_and_fit_in_git() -> None:
    card = (BASE / "README.md").read_text(encoding="utf-8")
    shipped = {p.name for p in BASE.iterdir() if not p.name.startswith(".")}
    assert set(SETTINGS["sha256"]) == shipped - {"README.md", "settings.json", "model.pt"}
    for name, digest in SETTINGS["sha256"].items():
        assert file_sha256(BASE / name) == digest, name
        assert SETTINGS["bytes"][name] == (BASE / name).stat().st_size <= GIT_FILE_LIMIT, name
        assert digest in card, f"{name}'s sha256 is not in the model card"
    index = model_shards.read_index(BASE / "model.pt")
    assert index["sha256"] in card


@pytest.fixture(scope="module")
def joined(tmp_path_factory) -> Path:
    """The shards joined in a copy of the model directory (the shards alone)."""
    copy = tmp_path_factory.mktemp("base")
    for name in SETTINGS["sha256"]:
        shutil.copyfile(BASE / name, copy / name)
    return model_shards.materialize(copy / "model.pt")


def test_the_shards_join_into_the_indexed_checkpoint(joined: Path) -> None:
    index = model_shards.read_index(BASE / "model.pt")
    assert joined.stat().st_size == index["bytes"] and file_sha256(joined) == index["sha256"]


def test_plain_fairseq_loads_the_verifier_without_the_plugin(joined: Path) -> None:
    # A fresh process: torch.load's own default (weights_only=True), fairseq's loader,
    # and no nmt_specdec or fairseq_plugins import anywhere.
    code = (
        "import sys, torch\n"
        f"state = torch.load({str(joined)!r}, map_location='cpu')\n"
        "assert state['cfg']['model']['arch'] == 'transformer', state['cfg']['model']['arch']\n"
        "assert not state['cfg']['common'].get('user_dir')\n"
        "from fairseq import checkpoint_utils\n"
        f"models, _, task = checkpoint_utils.load_model_ensemble_and_task([{str(joined)!r}], "
        f"arg_overrides={{'data': {str(BASE)!r}}})\n"
        "assert type(models[0]).__name__ == 'TransformerModel'\n"
        "assert not [m for m in sys.modules if m.startswith(('nmt_specdec', 'fairseq_plugins'))]\n"
        "print(sum(p.numel() for p in models[0].parameters()))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=joined.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) > 40_000_000  # Transformer-base, not the tiny model


def test_the_head_fits_the_verifier(joined: Path) -> None:
    from nmt_specdec import checkpoints
    from nmt_specdec.model.head_file import attach_head_file

    checkpoints.register_plugin()
    model, _ = checkpoints.load(str(joined), {"data": str(BASE)})
    attach_head_file(model.eval(), BASE / "head.pt")
    assert model.draft_block_size == 4


def test_translate_without_a_checkpoint_uses_the_base_model() -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["nmt-specdec-translate", "--spec-decoding", "--spec-k", "2", "--backend", "torch"],
        input="Datei wurde nicht gefunden.\n\nMöchten Sie die Änderungen speichern?\n",
        capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "File not found.", "", "Do you want to save the changes?"], done.stdout
