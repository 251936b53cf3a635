"""A checkpoint shipped in shards: split, joined on first use, checked every time."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nmt_specdec import model_shards
from nmt_specdec.errors import CheckpointError


@pytest.fixture
def sharded(tmp_path: Path) -> Path:
    """A 10,000-byte "checkpoint" in shards of 3,000 bytes; the file itself removed."""
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(os.urandom(10_000))
    (tmp_path / "original").write_bytes(checkpoint.read_bytes())
    model_shards.split(checkpoint, 3_000)
    checkpoint.unlink()
    return checkpoint


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_split_writes_shards_and_an_index(sharded: Path) -> None:
    index = json.loads(model_shards.index_path(sharded).read_text())
    assert [s["file"] for s in index["shards"]] == [
        f"model.pt-0000{i}-of-00004" for i in range(1, 5)]
    assert [s["bytes"] for s in index["shards"]] == [3000, 3000, 3000, 1000]
    assert index["bytes"] == 10_000 and len(index["sha256"]) == 64


def test_first_use_joins_the_original_bytes(sharded: Path) -> None:
    assert model_shards.materialize(sharded) == sharded
    assert sharded.read_bytes() == (sharded.parent / "original").read_bytes()
    assert _leftovers(sharded.parent) == []


def test_an_altered_joined_file_is_joined_again(sharded: Path) -> None:
    model_shards.materialize(sharded)
    data = bytearray(sharded.read_bytes())
    data[5] ^= 0xFF
    sharded.write_bytes(bytes(data))
    model_shards.materialize(sharded)
    assert sharded.read_bytes() == (sharded.parent / "original").read_bytes()


def test_a_truncated_joined_file_is_joined_again(sharded: Path) -> None:
    model_shards.materialize(sharded)
    sharded.write_bytes(sharded.read_bytes()[:100])
    model_shards.materialize(sharded)
    assert sharded.read_bytes() == (sharded.parent / "original").read_bytes()


def _break(shard: Path, how: str) -> None:
    if how == "removed":
        shard.unlink()
    elif how == "truncated":
        shard.write_bytes(shard.read_bytes()[:-1])
    else:  # altered: same size, one byte flipped
        data = bytearray(shard.read_bytes())
        data[10] ^= 0x01
        shard.write_bytes(bytes(data))


@pytest.mark.parametrize("how,words", [("removed", "shard 3 of 4 is missing"),
                                       ("truncated", "shard 3 of 4 has 2999 bytes"),
                                       ("altered", "shard 3 of 4 does not match")])
def test_a_broken_shard_is_named_and_nothing_is_left_half_written(sharded, how, words) -> None:
    shard = sharded.parent / "model.pt-00003-of-00004"
    _break(shard, how)
    with pytest.raises(CheckpointError) as caught:
        model_shards.materialize(sharded)
    message = str(caught.value)
    assert str(shard) in message and words in message and "\n" not in message
    assert not sharded.exists() and _leftovers(sharded.parent) == []


def test_a_broken_shard_does_not_replace_a_good_joined_file(sharded: Path) -> None:
    model_shards.materialize(sharded)
    sharded.write_bytes(b"stale")
    _break(sharded.parent / "model.pt-00001-of-00004", "altered")
    with pytest.raises(CheckpointError, match="shard 1 of 4"):
        model_shards.materialize(sharded)
    assert sharded.read_bytes() == b"stale" and _leftovers(sharded.parent) == []


def test_an_index_naming_a_file_elsewhere_is_refused(sharded: Path) -> None:
    path = model_shards.index_path(sharded)
    index = json.loads(path.read_text())
    index["shards"][0]["file"] = "../elsewhere"
    path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="not a shard index"):
        model_shards.materialize(sharded)


def test_a_checkpoint_without_an_index_is_left_alone(tmp_path: Path) -> None:
    plain = tmp_path / "plain.pt"
    assert model_shards.materialize(plain) == plain and not plain.exists()


def test_the_command_prints_the_joined_path(sharded: Path, capsys) -> None:
    assert model_shards.main([str(sharded.parent)]) == 0
    assert capsys.readouterr().out.strip() == str(sharded)
    assert sharded.is_file()


def test_the_command_fails_in_one_line(sharded: Path, capsys) -> None:
    _break(sharded.parent / "model.pt-00002-of-00004", "removed")
    assert model_shards.main([str(sharded)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "shard 2 of 4" in err
