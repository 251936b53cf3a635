"""``nmt-specdec-evaluate`` end to end on a tiny random-init model.

Everything is built in this process (no fairseq CLI subprocesses, which cost
seconds each): toy reversal text, a toy SentencePiece model, a binarized test
split, and a random ``specdec_transformer`` checkpoint saved as fairseq saves
them. The numbers are not checked, only the files' schema and sanity bounds.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.helpers.fairseq_toy import make_toy_data

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY_DIMS = ("--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
             "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
             "--encoder-layers", "1", "--decoder-layers", "1",
             "--encoder-attention-heads", "2", "--decoder-attention-heads", "2")
ROW_KEYS = {
    "name": str, "decoder": str, "beam": int, "batch_size": int,
    "wall_s_median": float, "wall_s_min": float, "wall_s_max": float, "wall_s": list,
    "cpu_s_median": float, "role": str, "speedup_min": float, "speedup_max": float,
    "sentences_per_s": float, "target_tokens": int, "target_tokens_per_s": float,
    "speedup": float, "bleu": float, "chrf": float, "differs_from_greedy": int,
    "equals_greedy": bool,
}
SPECDEC_KEYS = {"k": int, "beta": int, "tau": float, "mean_accepted_tokens": float,
                "iterations_per_sentence": float, "profile": dict}


def _load_script():
    """What ``nmt-specdec-evaluate`` runs: its ``main``, ``run`` and ``EvalConfig``."""
    import fairseq_plugins  # noqa: F401  (registers the task and model; safe loader)
    from nmt_specdec.evaluation import cli, config, pipeline

    return SimpleNamespace(main=cli.main, run=pipeline.run, EvalConfig=config.EvalConfig)


def _spm_pieces(raw: Path, root: Path):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=[str(raw / "train.src"), str(raw / "train.tgt")],
        model_prefix=str(root / "spm"),
        vocab_size=30, model_type="unigram", hard_vocab_limit=False, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(root / "spm.model"))
    return root / "spm.model", lambda line: " ".join(sp.encode(line, out_type=str))


def _binarize_in_process(raw: Path, data: Path, encode) -> None:
    """What fairseq-preprocess --joined-dictionary writes, for the test split."""
    from fairseq.data import Dictionary, indexed_dataset

    sides = ("src", "tgt")
    train = [(raw / f"train.{side}").read_text().splitlines() for side in sides]
    pieces = [[encode(line) for line in lines] for lines in train]
    dictionary = Dictionary()
    for lines in pieces:
        for line in lines:
            for piece in line.split():
                dictionary.add_symbol(piece)
    dictionary.finalize()
    data.mkdir(parents=True)
    for side in ("src", "tgt"):
        dictionary.save(str(data / f"dict.{side}.txt"))
        prefix = str(data / f"test.src-tgt.{side}")
        builder = indexed_dataset.make_builder(prefix + ".bin", impl="mmap",
                                               vocab_size=len(dictionary))
        for line in (raw / f"test.{side}").read_text().splitlines():
            ids = dictionary.encode_line(encode(line), add_if_not_exist=False)
            builder.add_item(ids)
        builder.finalize(prefix + ".idx")


def _save_random_checkpoint(data: Path, path: Path, task: str, arch: str,
                            extra=()) -> Path:
    """A random-init model saved in fairseq's checkpoint format (cfg + model)."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(data), "--task", task, "--arch", arch, "-s", "src", "-t", "tgt",
        "--dropout", "0", *TINY_DIMS, *extra])
    torch.manual_seed(0)
    model = tasks.setup_task(args).build_model(args)
    cfg = OmegaConf.to_container(convert_namespace_to_omegaconf(args), resolve=True,
                                 enum_to_str=True)
    history = [{"criterion_name": "x", "optimizer_name": "x", "num_updates": 0,
                "lr_scheduler_state": {"best": None}}]
    torch.save({"args": None, "cfg": cfg, "model": model.state_dict(),
                "optimizer_history": history, "extra_state": {}}, path)
    return path


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> dict:
    script = _load_script()  # registers the plugin (task, model, safe loader)
    root = tmp_path_factory.mktemp("evaluate_speed")
    raw = make_toy_data(root / "raw", n=200, seed=3,
                        splits={"train": 1.0, "test": 0.06})
    spm_model, encode = _spm_pieces(raw, root)
    _binarize_in_process(raw, root / "data", encode)
    specdec = _save_random_checkpoint(
        root / "data", root / "specdec.pt", "translation_specdec",
        "specdec_transformer_tiny", ("--draft-layers", "1", "--draft-block-size", "4"))
    stock = _save_random_checkpoint(root / "data", root / "stock.pt", "translation",
                                    "transformer")
    return {"script": script, "root": root, "raw": raw, "data": root / "data",
            "spm": spm_model, "specdec": specdec, "stock": stock}


def _config(toy: dict, out: str, **changes):
    values = dict(checkpoint=str(toy["specdec"]), out=str(toy["root"] / out),
                  data=str(toy["data"]), source_lang="src", target_lang="tgt",
                  spm_model=str(toy["spm"]), beams=(1, 2), max_len_a=1.0, max_len_b=4,
                  grid_k=(4,), grid_beta=(1, 3), grid_tau=(1.0,), batch_sizes=(1, 4),
                  repeats=2, warmup_batches=1, progress=False,
                  # the evaluation's logic on the torch engine; onnxruntime rows are
                  # tested in test_onnx_backend.py (the CPU default would add a suffix)
                  backends=("torch",))
    values.update(changes)
    return toy["script"].EvalConfig(**values)


@pytest.fixture(scope="module")
def binarized_results(toy: dict) -> dict:
    return toy["script"].run(_config(toy, "binarized", profile=True))


def _check_types(row: dict, keys: dict) -> None:
    for key, kind in keys.items():
        assert isinstance(row[key], kind), (row["name"], key, row[key])


def test_json_has_every_figure(binarized_results: dict, toy: dict) -> None:
    on_disk = json.loads((toy["root"] / "binarized" / "results.json").read_text())
    assert on_disk["rows"] == json.loads(json.dumps(binarized_results["rows"]))
    for key in ("command", "config", "machine", "model", "test_set", "timing", "memory",
                "signatures", "rows"):
        assert key in on_disk
    assert on_disk["machine"]["torch_threads"] == 1
    assert {"cpu", "gpu", "torch", "fairseq", "sacrebleu"} <= set(on_disk["machine"])
    params = on_disk["model"]["parameters"]
    assert params["verifier"] > 0 and params["draft_head"] > 0
    assert params["verifier"] + params["draft_head"] == params["total"]
    assert on_disk["memory"]["peak_rss_mib"] > 0
    assert on_disk["timing"]["cpu_over_wall"] > 0
    assert on_disk["signatures"]["bleu"].startswith("nrefs:1|")
    assert on_disk["test_set"]["sentences"] == 12

    rows = on_disk["rows"]
    names = {"stock greedy", "stock beam2", "engine greedy", "SpecDec K=4 β=1",
             "SpecDec K=4 β=3 τ=1"}
    assert sorted((r["batch_size"], r["name"]) for r in rows) == sorted(
        (bs, name) for bs in (1, 4) for name in names)
    for row in rows:
        _check_types(row, ROW_KEYS)
        assert 0 <= row["bleu"] <= 100 and 0 <= row["chrf"] <= 100
        assert row["speedup"] > 0 and row["sentences_per_s"] > 0
        assert row["speedup_min"] <= row["speedup"] <= row["speedup_max"]
        assert row["wall_s_min"] <= row["wall_s_median"] <= row["wall_s_max"]
        assert len(row["wall_s"]) == 2
        # The K=0 row is always measured, so "vs engine greedy" is always there.
        assert row["speedup_vs_k0_min"] <= row["speedup_vs_k0"] <= row["speedup_vs_k0_max"]
        if row["decoder"] == "specdec":
            _check_types(row, SPECDEC_KEYS)
            assert row["mean_accepted_tokens"] >= 1
            assert 0 <= row["mean_accepted_drafts"] <= row["k"]
            parts = {"encoder_s", "draft_s", "verify_s", "bookkeeping_s"}
            assert set(row["profile"]) >= parts
        else:
            assert row["mean_accepted_tokens"] is None and row["profile"] is None
        if row["name"] == "stock greedy":
            assert row["speedup"] == row["speedup_max"] == 1.0
            assert row["differs_from_greedy"] == 0 and row["role"] == "stock"
        if row["name"] == "engine greedy":
            assert row["speedup_vs_k0"] == 1.0 and row["k"] == 0
        if row["name"].startswith("SpecDec K=4 β=1"):  # lossless: fp32 CPU greedy
            assert row["differs_from_greedy"] == 0 and row["equals_greedy"]


def test_markdown_has_a_row_per_configuration(binarized_results: dict,
                                              toy: dict) -> None:
    text = (toy["root"] / "binarized" / "results.md").read_text()
    table = [line for line in text.splitlines() if line.startswith("| ")]
    for row in binarized_results["rows"]:
        assert any(line.startswith(f"| {row['batch_size']} | {row['name']} |")
                   for line in table), row["name"]
    assert "nrefs:1|" in text and "encoder" in text  # signature and profile table


def test_time_split_is_per_token_and_adds_up(binarized_results: dict, toy: dict,
                                            capsys: pytest.CaptureFixture) -> None:
    """--profile's table: every row of a profiled batch size with its timed ms per
    token; the profiled rows split theirs into parts that add up to the whole."""
    from nmt_specdec.evaluation.readme_table import main

    rows = binarized_results["rows"]
    assert main([str(toy["root"] / "binarized" / "results.json"), "--time-split"]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    assert len(lines) == len(rows)  # every batch size of this run has SpecDec rows
    split = 0
    for line, row in zip(lines, rows):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert cells[1] == row["name"]
        timed = 1000 * row["wall_s_median"] / row["target_tokens"]
        assert float(cells[2]) == pytest.approx(timed, abs=1e-3)
        if row["profile"] is None:
            assert cells[3:] == [""] * 6
            continue
        split += 1
        total = float(cells[3])
        parts = [float(cell.split()[0]) for cell in cells[4:8]]
        assert total > 0 and sum(parts) == pytest.approx(total, abs=3e-3)
        assert cells[8] == ""  # torch rows: no graph runtime to clock
    assert split == sum(row["decoder"] == "specdec" for row in rows) > 0
    # A run without --profile has nothing to split: one line, exit 2.
    unprofiled = json.loads(json.dumps(binarized_results))
    for row in unprofiled["rows"]:
        row["profile"] = None
    path = toy["root"] / "unprofiled.json"
    path.write_text(json.dumps(unprofiled))
    assert main([str(path), "--time-split"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--profile" in err
    # Nor a traceback for a file that is not there, or a plot it cannot write.
    assert main([str(toy["root"] / "missing.json")]) == 2
    assert main([str(toy["root"] / "binarized" / "results.json"), "--time-split",
                 "--plot", str(toy["root"] / "no" / "such" / "dir.png")]) == 2
    err = capsys.readouterr().err
    missing, unwritable = err.splitlines()
    assert "missing.json" in missing and "dir.png" in unwritable


def test_plot_is_a_valid_png(binarized_results: dict, toy: dict) -> None:
    from PIL import Image

    for name in ("bleu_vs_speedup.png", "time_split.png"):  # the run was profiled
        path = toy["root"] / "binarized" / name
        assert path.stat().st_size > 0
        with Image.open(path) as image:
            image.verify()
            assert image.format == "PNG" and image.size[0] > 0 and image.size[1] > 0


def test_raw_text_input_decodes_like_binarized(binarized_results: dict,
                                               toy: dict) -> None:
    raw = toy["raw"]
    results = toy["script"].run(_config(
        toy, "raw", src_file=str(raw / "test.src"), ref_file=str(raw / "test.tgt"),
        stock_only=True, beams=(1,), batch_sizes=(4,)))
    [row] = results["rows"]
    [same] = [r for r in binarized_results["rows"]
              if r["name"] == "stock greedy" and r["batch_size"] == 4]
    assert row["bleu"] == same["bleu"] and row["chrf"] == same["chrf"]
    assert not (toy["root"] / "raw" / "time_split.png").exists()  # not profiled


def test_specdec_rows_refused_without_draft_head(toy: dict) -> None:
    from nmt_specdec.errors import UserError

    with pytest.raises(UserError, match="--stock-only"):
        toy["script"].run(_config(toy, "stock", checkpoint=str(toy["stock"])))
    results = toy["script"].run(_config(toy, "stock", checkpoint=str(toy["stock"]),
                                        stock_only=True, batch_sizes=(4,),
                                        max_sentences=8))
    assert [r["name"] for r in results["rows"]] == ["stock greedy", "stock beam2"]
    assert results["model"]["parameters"]["draft_head"] == 0
    assert results["test_set"]["sentences"] == 8


def test_stock_checkpoint_drafts_with_its_8bit_copy(toy: dict, onnx_cache) -> None:
    """Without a draft head, --drafters verifier-int8 keeps the engine's greedy and
    the 8-bit copy's rows (the head's are dropped), with greedy's output."""
    results = toy["script"].run(_config(
        toy, "stock_copy", checkpoint=str(toy["stock"]), beams=(1,), grid_k=(0, 2),
        grid_beta=(1,), batch_sizes=(1,), repeats=1, max_sentences=8,
        backends=("onnxruntime",), drafters=("head", "verifier-int8"), profile=True,
        cpu=True))  # ONNX Runtime is the CPU backend
    rows = {r["name"]: r for r in results["rows"]}
    assert list(rows) == ["stock greedy", "engine greedy [onnxruntime]",
                          "SpecDec K=2 β=1 drafter=verifier-int8 [onnxruntime]"]
    drafted = rows["SpecDec K=2 β=1 drafter=verifier-int8 [onnxruntime]"]
    assert drafted["differs_from_greedy"] == 0 and drafted["mean_accepted_tokens"] > 1.0
    # --profile on ONNX Runtime also clocks the runtime's own calls: every one of them
    # (the 8-bit copy's too) is made inside the encoder, draft or verify component.
    for name in ("engine greedy [onnxruntime]",
                 "SpecDec K=2 β=1 drafter=verifier-int8 [onnxruntime]"):
        prof = rows[name]["profile"]
        calls = prof["encoder_s"] + prof["draft_s"] + prof["verify_s"]
        assert 0 < prof["runtime_s"] <= calls
    assert drafted["profile"]["draft_s"] > 0  # the copy's calls are drafts


def test_main_runs_the_command_line(toy: dict, capsys: pytest.CaptureFixture) -> None:
    out = toy["root"] / "cli"
    argv = ["--checkpoint", str(toy["specdec"]), "--data", str(toy["data"]),
            "-s", "src", "-t", "tgt", "--spm-model", str(toy["spm"]),
            "--first-sentences", "6",
            "--beams", "1", "--grid-k", "2", "--grid-beta", "1", "--batch-sizes", "3",
            "--max-len-a", "1", "--max-len-b", "4", "--repeats", "1", "--threads", "1",
            "--backend", "torch", "--no-progress", "--out", str(out)]
    assert toy["script"].main(argv) == 0
    printed = capsys.readouterr().out
    assert "| 3 | stock greedy |" in printed and "| 3 | SpecDec K=2 β=1" in printed
    assert "| 3 | engine greedy |" in printed  # measured without --grid-k 0
    results = json.loads((out / "results.json").read_text())
    assert results["test_set"]["sentences"] == 6
    assert results["config"]["max_sentences"] == 6
    assert "--first-sentences 6" in results["command"]


def test_bad_out_dir_fails_before_decoding(toy: dict, monkeypatch) -> None:
    from nmt_specdec.errors import UserError
    from nmt_specdec.evaluation import loading

    def no_loading(*args, **kwargs):
        raise AssertionError("loaded the checkpoint before checking --out")

    monkeypatch.setattr(loading, "load_checkpoint", no_loading)
    with pytest.raises(UserError, match="--out"):
        toy["script"].run(_config(toy, str(toy["spm"] / "results")))  # under a file


def test_loads_through_the_safe_loader_where_none_is_installed(toy: dict, monkeypatch) -> None:
    """As in a process that never imported the plugin: fairseq's own loader."""
    from fairseq import checkpoint_utils

    from nmt_specdec.evaluation import loading

    monkeypatch.setattr(checkpoint_utils, "load_checkpoint_to_cpu",
                        checkpoint_utils.load_checkpoint_to_cpu.__wrapped__)
    monkeypatch.setattr(checkpoint_utils, "torch", torch)
    weights_only = []
    plain_load = torch.load

    def recording_load(*args, **kwargs):
        weights_only.append(kwargs.get("weights_only"))
        return plain_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recording_load)
    loading.load_checkpoint(_config(toy, "unused"), torch.device("cpu"))
    assert weights_only and all(weights_only)


def test_console_entry_point_is_declared() -> None:
    import importlib
    import tomllib

    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    entry = pyproject["project"]["scripts"]["nmt-specdec-evaluate"]
    module, _, name = entry.partition(":")
    assert callable(getattr(importlib.import_module(module), name))


def test_pareto_front_keeps_only_undominated_points() -> None:
    from nmt_specdec.evaluation.plot import pareto_front

    # (speedup, BLEU): (1.5, 8) is beaten by (2, 9) on both axes; (1, 10) ties nobody.
    points = [(1.0, 10.0), (2.0, 9.0), (0.5, 11.0), (1.5, 8.0), (2.0, 9.0)]
    assert pareto_front(points) in ([2, 0, 1, 4], [2, 0, 4, 1])


def test_main_prints_one_line_error(toy: dict, capsys: pytest.CaptureFixture) -> None:
    code = toy["script"].main(["--checkpoint", str(toy["specdec"]),
                               "--data", str(toy["data"]),
                               "--out", str(toy["root"] / "err")])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "--spm-model" in err and "\n" not in err


def test_each_repeat_runs_the_passes_in_a_fresh_recorded_order(binarized_results: dict,
                                                                toy: dict) -> None:
    from nmt_specdec.evaluation.runner import pass_orders

    timing = binarized_results["timing"]
    labels = {f"{r['name']} bs{r['batch_size']}" for r in binarized_results["rows"]}
    assert timing["order"] == "random" and timing["order_seed"] == 0
    assert len(timing["orders"]) == timing["repeats"] == 2
    assert all(sorted(order) == sorted(labels) for order in timing["orders"])
    # Seeded: the same seed gives the same orders, and repeats differ.
    assert pass_orders(10, 5, seed=3) == pass_orders(10, 5, seed=3)
    assert len({tuple(order) for order in pass_orders(10, 5, seed=3)}) == 5
    text = (toy["root"] / "binarized" / "results.md").read_text()
    assert "fresh random order" in text and "random.Random(0)" in text


def test_auto_k_starts_every_pass_from_its_initial_state(toy: dict, monkeypatch) -> None:
    from nmt_specdec.decoding.generator import SpecDecGenerator

    resets = []
    original = SpecDecGenerator.reset_k_policy

    def counting(self):
        resets.append(self.options.auto_k)
        original(self)
        # The initial state: no acceptance counted, no pass cost measured.
        assert not any(self.k_policy.acceptance.reached) and not self.k_policy.table.recent

    monkeypatch.setattr(SpecDecGenerator, "reset_k_policy", counting)
    results = toy["script"].run(_config(toy, "auto", grid_auto=True, grid_beta=(1,),
                                        beams=(1,), batch_sizes=(4,), max_sentences=8,
                                        warmup_batches=1))
    auto_rows = [r for r in results["rows"] if r["auto_k"]]
    assert [r["name"].split(" (")[0] for r in auto_rows] == ["SpecDec auto K≤4 β=1"]
    # One warm-up pass and two timed passes, each from a fresh policy.
    assert resets == [True] * 3
    assert results["timing"]["auto_k_state"] == "reset before every pass"


def test_rows_that_accept_no_drafts_say_so() -> None:
    from types import SimpleNamespace

    from nmt_specdec.decoding.stats import SpecDecStats
    from nmt_specdec.evaluation.config import specdec
    from nmt_specdec.evaluation.plot import plot_group
    from nmt_specdec.evaluation.report import row_name

    idle = SpecDecStats(iterations=10, tokens=10)
    busy = SpecDecStats(iterations=10, tokens=16)
    k4 = SimpleNamespace(spec=specdec(k=4, backend="torch"))
    k0 = SimpleNamespace(spec=specdec(k=0, backend="torch"))
    assert row_name(k4, idle) == "SpecDec K=4 β=1 (drafted nothing)"
    assert row_name(k4, busy) == "SpecDec K=4 β=1"
    assert row_name(k0, idle) == "engine greedy"  # K=0 drafts nothing by design
    rows = [{"role": "specdec", "name": row_name(k4, idle)},
            {"role": "specdec", "name": row_name(k4, busy)},
            {"role": "engine greedy", "name": "engine greedy"},
            {"role": "stock", "name": "stock greedy"}]
    assert [plot_group(r) for r in rows] == ["drafted nothing", "specdec", "engine greedy",
                                             "stock"]


def test_readme_table_is_rebuilt_from_results_json(binarized_results: dict, toy: dict,
                                                   capsys: pytest.CaptureFixture) -> None:
    from nmt_specdec.evaluation.readme_table import main

    assert main([str(toy["root"] / "binarized" / "results.json")]) == 0
    text = capsys.readouterr().out
    assert "(command not recorded)" in text  # run(cfg) without a command line
    for row in binarized_results["rows"]:
        [line] = [line for line in text.splitlines()
                  if line.startswith(f"| {row['batch_size']} | {row['name']} |")]
        low, high = row["speedup_min"], row["speedup_max"]
        assert f"{row['speedup']:.2f}x ({low:.2f}x–{high:.2f}x)" in line
    assert "fresh random order" in text and "BLEU signature" in text
    # An older results.json (schema 1: no spread, no orders) still prints.
    from nmt_specdec.evaluation.readme_table import readme_table

    old = json.loads(json.dumps(binarized_results))
    old["timing"] = {key: old["timing"][key]
                     for key in ("repeats", "warmup_batches", "cpu_over_wall")}
    for row in old["rows"]:
        for key in ("speedup", "speedup_vs_k0"):
            del row[f"{key}_min"], row[f"{key}_max"]
    assert "order not recorded" in readme_table(old)



def test_the_sampling_grid_compares_samples_with_samples(toy: dict) -> None:
    """--sampling-topk adds stock sampling, the engine's sampling and speculative
    sampling; each compares with stock sampling and the engine's sampling at its
    batch size, reports acceptance per slot, and is never checked against greedy."""
    results = toy["script"].run(_config(
        toy, "sampling", beams=(1,), grid_k=(0, 2), grid_beta=(1,), batch_sizes=(1, 4),
        max_sentences=8, sampling_topk=3, max_len_a=0.0, max_len_b=6))
    rows = {(r["name"], r["batch_size"]): r for r in results["rows"]}
    names = [r["name"] for r in results["rows"] if r["batch_size"] == 1]
    assert names == ["stock greedy", "engine greedy", "SpecDec K=2 β=1",
                     "stock sampling top-3", "engine sampling top-3",
                     "SpecDec K=2 sampling top-3"]
    for batch in (1, 4):
        stock = rows["stock sampling top-3", batch]
        engine = rows["engine sampling top-3", batch]
        spec = rows["SpecDec K=2 sampling top-3", batch]
        for row in (stock, engine, spec):
            assert row["role"] == "sampling"
            assert row["differs_from_greedy"] is None and row["equals_greedy"] is None
        # Ratios against the sampling references of the same repeats, not greedy's.
        assert stock["speedup"] == 1.0 and engine["speedup_vs_k0"] == 1.0
        assert spec["speedup"] == pytest.approx(statistics.median(
            [s / t for s, t in zip(stock["wall_s"], spec["wall_s"])]))
        assert len(spec["slot_acceptance"]) == 2 and spec["mean_accepted_tokens"] >= 1.0
    # A sentence's sample depends on the seed and the sentence, not on the batch
    # (with --max-len-a 0: fairseq's length limit reads the batch's padded width).
    for name in ("engine sampling top-3", "SpecDec K=2 sampling top-3"):
        assert [rows[name, 1][key] for key in ("target_tokens", "chrf", "bleu")] == \
            [rows[name, 4][key] for key in ("target_tokens", "chrf", "bleu")]
    assert "Sampling rows" in (toy["root"] / "sampling" / "results.md").read_text()
