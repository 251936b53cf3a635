"""nmt-specdec-evaluate's grid: ``--grid-refine-steps`` adds a row per value to
every row that drafts, names it, and refuses a negative value in one line."""

import pytest

from nmt_specdec.decoding.options import VERIFIER_DRAFTER_K
from nmt_specdec.errors import UserError
from nmt_specdec.evaluation.cli import build_parser, config_from_args
from nmt_specdec.evaluation.config import build_grid
from nmt_specdec.evaluation.validation import validate


def _config(tmp_path, *flags):
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(b"")
    argv = ["--checkpoint", str(checkpoint), "--out", str(tmp_path / "out"),
            "--data", str(tmp_path), "--spm-model", str(checkpoint), "--beams", "1",
            "--grid-k", "0", "2", "--grid-auto", "--grid-beta", "1", "--backend", "torch",
            *flags]
    return config_from_args(build_parser().parse_args(argv), argv)


def test_each_refinement_count_is_a_row_of_every_drafting_configuration(tmp_path):
    cfg = _config(tmp_path, "--grid-refine-steps", "1", "2")
    validate(cfg)
    names = [spec.name for spec in build_grid(cfg, default_k=4)]
    assert names == ["stock greedy", "engine greedy",
                     "SpecDec K=2 β=1 refine×1", "SpecDec K=2 β=1 refine×2",
                     "SpecDec auto K≤4 β=1 refine×1", "SpecDec auto K≤4 β=1 refine×2"]
    steps = [spec.decoding.refine_steps for spec in build_grid(cfg, default_k=4)]
    assert steps == [None, None, 1, 2, 1, 2]


def test_without_the_flag_rows_draft_as_the_head_says(tmp_path):
    specs = build_grid(_config(tmp_path), default_k=4)
    assert [spec.name for spec in specs][2:] == ["SpecDec K=2 β=1", "SpecDec auto K≤4 β=1"]
    assert {spec.decoding.refine_steps for spec in specs} == {None}


def test_a_negative_refinement_count_is_refused_in_one_line(tmp_path):
    with pytest.raises(UserError, match="--grid-refine-steps values must be >= 0, got -1"):
        validate(_config(tmp_path, "--grid-refine-steps", "2", "-1"))


def test_the_sampling_grid_follows_the_backends_and_ks(tmp_path):
    cfg = _config(tmp_path, "--sampling-topk", "10", "--grid-k", "0", "2", "4",
                  "--backend", "torch", "onnxruntime")
    validate(cfg)
    names = [spec.name for spec in build_grid(cfg, default_k=4)]
    assert names[-7:] == ["stock sampling top-10", "engine sampling top-10",
                          "SpecDec K=2 sampling top-10", "SpecDec K=4 sampling top-10",
                          "engine sampling top-10 [onnxruntime]",
                          "SpecDec K=2 sampling top-10 [onnxruntime]",
                          "SpecDec K=4 sampling top-10 [onnxruntime]"]
    assert not any("sampling" in name for name in names[:-7])


def test_the_sampling_grid_drafts_with_the_8bit_copy_where_asked(tmp_path):
    cfg = _config(tmp_path, "--sampling-topk", "10", "--grid-k", "0", "2", "--backend", "torch",
                  "onnxruntime", "--drafters", "head", "verifier-int8")
    validate(cfg)
    specs = [spec for spec in build_grid(cfg, default_k=4) if spec.sampling_topk]
    assert [spec.name for spec in specs][-3:] == [
        "engine sampling top-10 [onnxruntime]", "SpecDec K=2 sampling top-10 [onnxruntime]",
        "SpecDec K=2 sampling top-10 drafter=verifier-int8 [onnxruntime]"]
    assert [spec.drafter for spec in specs].count("verifier-int8") == 1


def test_each_copy_asked_for_gets_its_greedy_and_sampling_rows(tmp_path):
    """Both copies, in the order given, on ONNX Runtime only (fp32, and beside
    --int8's verifier at a fixed K; not on torch; sampling in fp32); their auto rows
    explore up to the copies' cap, as ``--spec-k auto --spec-drafter verifier-int4``
    does, not the head's block size."""
    cfg = _config(tmp_path, "--sampling-topk", "10", "--grid-k", "0", "3", "--backend", "torch",
                  "onnxruntime", "--int8", "--drafters", "verifier-int4", "verifier-int8")
    validate(cfg)
    head_block = VERIFIER_DRAFTER_K - 2  # the head's draft block size
    drafted = [spec for spec in build_grid(cfg, default_k=head_block) if spec.drafter != "head"]
    assert {spec.backend for spec in drafted} == {"onnxruntime"}
    assert [spec.name for spec in drafted] == [
        *(f"SpecDec {k} β=1 drafter={copy} [onnxruntime]"
          for copy in ("verifier-int4", "verifier-int8")
          for k in ("K=3", f"auto K≤{VERIFIER_DRAFTER_K}")),
        *(f"SpecDec K=3 β=1 drafter={copy} [onnxruntime int8]"  # auto refuses them there
          for copy in ("verifier-int4", "verifier-int8")),
        *(f"SpecDec K=3 sampling top-10 drafter={copy} [onnxruntime]"
          for copy in ("verifier-int4", "verifier-int8"))]
    with pytest.raises(UserError, match="--drafters verifier-int4 needs onnxruntime"):
        validate(_config(tmp_path, "--backend", "torch", "--drafters", "verifier-int4"))


def test_a_bad_sampling_topk_is_refused_in_one_line(tmp_path):
    with pytest.raises(UserError, match="--sampling-topk values must be >= 1, got 0"):
        validate(_config(tmp_path, "--sampling-topk", "0"))


def test_the_copies_take_their_own_fixed_k_where_asked(tmp_path):
    """``--grid-copy-k``: the copies' fixed rows (greedy, beside --int8's verifier,
    sampling) at those K instead of --grid-k's, the head's rows and every auto row
    as before; a K below 1 is refused in one line."""
    cfg = _config(tmp_path, "--sampling-topk", "10", "--backend", "onnxruntime", "--int8",
                  "--drafters", "head", "verifier-int4", "--grid-copy-k", "4", "10")
    validate(cfg)
    specs = build_grid(cfg, default_k=4)
    head = {(spec.k, spec.auto) for spec in specs if spec.kind == "specdec"
            and spec.drafter == "head" and spec.k}
    assert head == {(2, False), (4, True)}
    assert [spec.name for spec in specs if spec.drafter == "verifier-int4"] == [
        "SpecDec K=4 β=1 drafter=verifier-int4 [onnxruntime]",
        "SpecDec K=10 β=1 drafter=verifier-int4 [onnxruntime]",
        f"SpecDec auto K≤{VERIFIER_DRAFTER_K} β=1 drafter=verifier-int4 [onnxruntime]",
        "SpecDec K=4 β=1 drafter=verifier-int4 [onnxruntime int8]",
        "SpecDec K=10 β=1 drafter=verifier-int4 [onnxruntime int8]",
        "SpecDec K=4 sampling top-10 drafter=verifier-int4 [onnxruntime]",
        "SpecDec K=10 sampling top-10 drafter=verifier-int4 [onnxruntime]"]
    with pytest.raises(UserError, match="--grid-copy-k values must be >= 1, got 0"):
        validate(_config(tmp_path, "--grid-copy-k", "0"))
