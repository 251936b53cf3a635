"""The shipped model (named in ``tests/helpers/shipped_model.py``).

Real-model properties that a broken file, loader, head or engine would fail:
the files match their recorded sha256; they load through the safe loader
(float16 on disk, float32 in memory); known sentences translate to English with
the expected words; on the first 200 test sentences, beta=1 SpecDec equals
fairseq's greedy search at batch 1 and 16, where every sentence that differs
must be a near-tie (logit gap below ``NEAR_TIE_LOGIT_GAP``, justified in
:mod:`nmt_specdec.evaluation.mismatch`), with more than a floor of tokens per
iteration; and ``--deterministic`` gives the same bytes at batch 1, 7 and 32.

The test split is prepared by the project's own recipe; only an unreachable
network/apt skips those tests, any other failure fails them (see the helper).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest
import torch
from fairseq.dataclass.configs import GenerationConfig

from nmt_specdec import shipped_models
from nmt_specdec.checkpoint_safety import load_checkpoint
from nmt_specdec.evaluation.mismatch import NEAR_TIE_LOGIT_GAP, logit_gaps
from nmt_specdec.hashing import file_sha256 as sha256
from nmt_specdec.shipping import save_compact
from nmt_specdec.workflows import quickstart, quickstart_pretrained
from nmt_specdec.workflows.quickstart_pretrained import EXAMPLES, translate_examples
from tests.helpers.shipped_model import (
    MODEL_DIR,
    REPO_ROOT,
    SETTINGS,
    decode_all,
    encoded_split,
    load_model,
)

SENTENCES = 200
DETERMINISTIC_SENTENCES = 100
# A random (untrained) head gets ~1.0 tokens per iteration.
MIN_TOKENS_PER_ITERATION = 1.15


def _make_recipe(target: str) -> str:
    """The command lines of one Makefile target."""
    lines = (REPO_ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return "\n".join(recipe)


def test_the_quickstart_decodes_the_base_model_or_this_one() -> None:
    # `make quickstart` runs scripts/quickstart.py --model $(MODEL): the base model by
    # default (the parser's default, which its help names), this model with MODEL=tiny.
    recipe = _make_recipe("quickstart")
    assert "scripts/quickstart.py --model $(MODEL)" in recipe, recipe
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    assert "\nMODEL ?= base\n" in makefile
    shim = (REPO_ROOT / "scripts" / "quickstart.py").read_text(encoding="utf-8")
    assert "from nmt_specdec.workflows.quickstart import main" in shim
    parser = quickstart.build_parser()
    assert parser.parse_args([]).model.resolve() == shipped_models.BASE.resolve()
    assert shipped_models.model_directory("tiny").resolve() == MODEL_DIR.resolve()
    assert "models/gettext-de-en-base" in " ".join(parser.format_help().split())
    assert (MODEL_DIR / "model.pt").is_file() and (MODEL_DIR / "settings.json").is_file()


def test_files_match_recorded_sha256() -> None:
    card = (MODEL_DIR / "README.md").read_text(encoding="utf-8")
    for name, digest in SETTINGS["sha256"].items():
        assert sha256(MODEL_DIR / name) == digest, name
        assert digest in card, f"{name}'s sha256 is not in the model card"
    assert sum(SETTINGS["bytes"].values()) <= 25 * 2**20


def test_float16_on_disk_float32_in_memory(model_and_task) -> None:
    state = load_checkpoint(str(MODEL_DIR / "model.pt"))
    floats = [v for v in state["model"].values() if v.is_floating_point()]
    assert floats and all(v.dtype == torch.float16 for v in floats)
    model, _ = model_and_task
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_loading_to_decode_tells_nothing_about_training(caplog) -> None:
    # The shipped model was trained with --freeze-verifier; its training notes are not
    # for someone who loads it to translate.
    with caplog.at_level(logging.INFO):
        load_model()
    assert not [r for r in caplog.records if "--freeze-verifier" in r.getMessage()]


def test_resaved_checkpoint_loads_through_the_safe_loader(tmp_path: Path) -> None:
    # fairseq's loader turns cfg into an OmegaConf DictConfig; saving that as
    # it is would need OmegaConf's classes, which the safe loader refuses.
    import fairseq_plugins  # noqa: F401  (fairseq's loader made safe: as on every path we load by)
    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(str(MODEL_DIR / "model.pt"))
    save_compact(state, tmp_path / "resaved.pt")
    again = load_checkpoint(str(tmp_path / "resaved.pt"))
    assert again["model"].keys() == state["model"].keys()


def test_known_sentences_translate() -> None:
    examples = translate_examples()
    assert sum(bool(e["expect"]) for e in examples) >= 3
    for example in examples:
        words = example["translation"].lower()
        assert all(w.lower() in words for w in example["expect"]), example


def test_examples_translate_in_a_fresh_process() -> None:
    # The quickstart translates its examples after an evaluation step that may be
    # reused (outputs up to date): nothing else has imported the plugin then.
    import subprocess
    import sys

    code = ("import sys, fairseq\n"
            "assert 'fairseq_plugins' not in sys.modules\n"
            "from nmt_specdec.workflows.quickstart_pretrained import translate_examples\n"
            "print(len(translate_examples()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=MODEL_DIR.parents[1], timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) == len(quickstart_pretrained.examples_for(MODEL_DIR))


def _readme_command(program: str, marker: str = "") -> str:
    """The README's first command line that runs ``program`` with ``marker`` on its
    first line (continuation lines joined)."""
    lines = (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if f"{program} " in line and marker in line)
    command = []
    for line in lines[start:]:
        command.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            break
    return " ".join(command)


@pytest.mark.parametrize("loglevel", [None, "INFO"])
def test_the_readmes_interactive_command_is_quiet(loglevel) -> None:
    """The README's fairseq-interactive command with the plugin (the shipped base
    model, SpecDec) on in-domain lines: a hypothesis per line, at most 3 lines on
    stderr (fairseq's logs with LOGLEVEL=INFO)."""
    import os
    import subprocess
    import sys

    command = _readme_command("fairseq-interactive", "--user-dir")
    command = command[command.index("fairseq-interactive"):]  # stdin comes from here
    env = {**os.environ, "M": str(shipped_models.BASE.relative_to(REPO_ROOT)),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("LOGLEVEL", None)
    if loglevel:
        env["LOGLEVEL"] = loglevel
    lines = "Datei wurde nicht gefunden.\nMöchten Sie die Änderungen speichern?\n"
    done = subprocess.run(["bash", "-c", command], input=lines, capture_output=True, text=True,
                          cwd=REPO_ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [line.split("\t")[-1] for line in done.stdout.splitlines()
            if line.startswith("D-")] == ["File not found.", "Do you want to save the changes?"]
    stderr = done.stderr.splitlines()
    assert (len(stderr) <= 3) == (loglevel is None), done.stderr[-2000:]


@pytest.fixture(scope="module")
def model_and_task():
    torch.set_num_threads(1)
    return load_model()


@pytest.fixture(scope="module")
def test_sources(tmp_path_factory, model_and_task):
    """The first test sentences, encoded for the shipped model."""
    _, task = model_and_task
    return encoded_split(tmp_path_factory.mktemp("shipped_data"), SENTENCES, task)



def _length_args():
    return dict(max_len_a=SETTINGS["max_len_a"], max_len_b=SETTINGS["max_len_b"])


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", [1, 16])
def test_beta1_equals_fairseq_greedy_up_to_near_ties(model_and_task, test_sources, batch_size):
    from fairseq.sequence_generator import SequenceGenerator

    from nmt_specdec.decoding.generator import SpecDecGenerator
    from nmt_specdec.decoding.options import DecodingOptions, LengthRules

    model, task = model_and_task
    stock = SequenceGenerator([model], task.target_dictionary, beam_size=1, **_length_args())
    rules = LengthRules.from_generation_args(
        GenerationConfig(min_len=1, unkpen=0.0, lenpen=1.0, **_length_args()), model)
    spec = SpecDecGenerator(model, task.target_dictionary, DecodingOptions(k=SETTINGS["k"]),
                            rules)
    greedy = decode_all(stock, model, task, test_sources, batch_size)
    drafted = decode_all(spec, model, task, test_sources, batch_size)
    differ = [i for i, (a, b) in enumerate(zip(greedy, drafted)) if a != b]
    gaps = logit_gaps(model, test_sources, dict(enumerate(greedy)), dict(enumerate(drafted)),
                      task.target_dictionary.eos(), limit=len(test_sources))
    # Every difference is a first-token flip (not a length rule) at a near-tie.
    assert [g["sentence"] for g in gaps] == differ
    assert all(g["logit_gap"] < NEAR_TIE_LOGIT_GAP for g in gaps), gaps
    assert len(differ) <= 0.01 * len(greedy), f"{len(differ)} sentences differ"
    assert spec.stats.mean_accepted_tokens > MIN_TOKENS_PER_ITERATION, spec.stats.summary()


@pytest.mark.slow
def test_deterministic_mode_gives_the_same_bytes_at_any_batch_size(model_and_task,
                                                                   test_sources):

    model, task = model_and_task
    sources = test_sources[:DETERMINISTIC_SENTENCES]
    options = dict(spec_decoding=True, deterministic=True, spec_k=str(SETTINGS["k"]),
                   spec_beta=1)
    saved = {name: getattr(task.cfg, name) for name in options}
    try:
        for name, value in options.items():
            setattr(task.cfg, name, value)
        generator = task.build_generator([model], GenerationConfig(beam=1, **_length_args()))
    finally:
        for name, value in saved.items():
            setattr(task.cfg, name, value)
    assert type(generator).__name__ == "DeterministicGenerator"
    digests = {}
    for batch_size in (1, 7, 32):
        outputs = decode_all(generator, model, task, sources, batch_size)
        text = "\n".join(task.target_dictionary.string(torch.tensor(t)) for t in outputs)
        digests[batch_size] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert len(set(digests.values())) == 1, digests


@pytest.mark.parametrize("error, outcome", [
    ("unreachable", pytest.skip.Exception), ("bug", pytest.fail.Exception)])
def test_only_an_unreachable_source_skips(tmp_path, monkeypatch, error, outcome) -> None:
    from nmt_specdec.data.steps import SourceUnavailable
    from tests.helpers import shipped_model

    def failing(*args, **kwargs):
        if error == "unreachable":
            raise SourceUnavailable("apt-get download: CalledProcessError")
        raise KeyError("a bug in the recipe")

    monkeypatch.setattr(shipped_model, "prepare_test_split", failing)
    with pytest.raises(outcome) as caught:
        shipped_model.split_lines(tmp_path, 5)
    assert ("unreachable" if error == "unreachable" else "not a network problem") in str(
        caught.value)


@pytest.mark.parametrize("failing_tool, stderr, unavailable", [
    ("apt-get", "E: Failed to fetch http://deb.debian.org/...  Temporary failure resolving "
     "'deb.debian.org'", True),
    ("apt-get", "E: Unable to locate package trans-de-en", True),  # no package lists
    ("apt-get", "E: Invalid operation download", False),
    ("dpkg", "dpkg-deb: error: archive has premature member", False),
])
def test_ding_download_failure_is_told_apart(tmp_path, monkeypatch, failing_tool, stderr,
                                             unavailable) -> None:
    import subprocess

    from nmt_specdec.data import ding
    from nmt_specdec.data.steps import RecipeError, SourceUnavailable

    def run(cmd, cwd=None, **kwargs):
        if cmd[0] == failing_tool:
            raise subprocess.CalledProcessError(100, cmd, stderr=stderr)
        (Path(cwd) / f"{ding.DEBIAN_PACKAGE}_1_all.deb").write_bytes(b"")  # apt-get's .deb

    monkeypatch.setattr(ding.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(ding.subprocess, "run", run)
    with pytest.raises(RecipeError) as caught:
        ding.fetch_debian_package(tmp_path)
    assert isinstance(caught.value, SourceUnavailable) == unavailable
    assert failing_tool in str(caught.value)


def test_examples_are_written_here() -> None:
    # The example sentences are the project's own (see quickstart_pretrained),
    # for every shipped model's corpus.
    assert set(EXAMPLES) == {"gettext", "ding"}
    assert all(len(examples) >= 5 for examples in EXAMPLES.values())
