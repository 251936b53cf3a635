"""Does drafting pay on this CPU? The break-even tokens per iteration, per K and model shape.

For the checkpoint and for three reference shapes with random weights (3+3
layers d=256; Transformer-base 6+6 d=512; Transformer-big 6+6 d=1024; each with
the checkpoint's vocabulary and draft-head layout) on one backend, at 1 thread:

- verify(N), N = 1..K+1: one verify call of N new positions against a cache
  holding a prefix of ``--past`` tokens (medians of repeated calls);
- draft(K): the draft head's one call at K;
- host(K): the loop's own time per iteration (K=0: a greedy step), from real
  decodes of ``--sentences-file`` by the checkpoint: decode time minus the time
  inside model calls (:mod:`nmt_specdec.evaluation.profiling`'s instrumented pass).

For each K it prints break-even = (verify(K+1) + draft(K) + host(K)) /
(verify(1) + host(0)) (see :mod:`benchmarks.cost_model_report`) beside the
tokens per iteration the checkpoint's head gets on those sentences and the
oracle's (a drafter that proposes the verifier's own greedy output), and the
predicted speedup over greedy (tok/iter / break-even). Random weights do not
translate: those shapes give time per token only, and are labelled so.

Example (from the repository root; defaults: the shipped model, its 40
hand-written test sentences, every shape, ONNX Runtime)::

    python benchmarks/cost_model.py --batch-sizes 1 32 --out results/cost_model
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Callable, Dict, Hashable, List, NamedTuple, Optional

import torch

if __package__ in (None, ""):  # run as a script: the repository root is not on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cost_model_report import (  # noqa: E402  (after the path fix above)
    RANDOM_LABEL,
    cost_rows,
    format_header,
    format_table,
    machine_header,
    verdicts,
    write_outputs,
)
from nmt_specdec.errors import UserError  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CHECKPOINT = REPO_ROOT / "models" / "gettext-de-en-tiny" / "model.pt"
DEFAULT_SENTENCES = REPO_ROOT / "tests" / "helpers" / "de_sentences.txt"
MIN_ROUNDS = 3  # timed rounds even past the time budget (a median needs a few)


class Shape(NamedTuple):
    title: str
    layers: int
    dim: int
    ffn: int


SHAPES = {"checkpoint": None,
          "tiny": Shape("3+3 d=256 ffn 1024", 3, 256, 1024),
          "base": Shape("6+6 d=512 ffn 2048 (transformer_wmt_en_de)", 6, 512, 2048),
          "big": Shape("6+6 d=1024 ffn 4096 (transformer big)", 6, 1024, 4096)}
# Rough seconds, for the run-time estimate printed at the start: building and
# (ONNX Runtime, first run only: cached by weights) exporting a random shape.
PREPARE_S = {"checkpoint": 5, "tiny": 15, "base": 40, "big": 120}


def median_ms(calls: Dict[Hashable, Callable[[], object]], rounds: int,
              budget_s: float) -> Dict[Hashable, float]:
    """Median milliseconds of each call, timed in interleaved rounds (machine
    drift hits every call alike) until ``rounds`` or ``budget_s`` is spent."""
    for fn in calls.values():  # first calls allocate buffers and bind them
        fn()
        fn()
    times: Dict[Hashable, List[float]] = {key: [] for key in calls}
    deadline = time.perf_counter() + budget_s
    for done in range(1, rounds + 1):
        for key, fn in calls.items():
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
        if done >= min(MIN_ROUNDS, rounds) and time.perf_counter() > deadline:
            break
    return {key: 1e3 * statistics.median(values) for key, values in times.items()}


def call_costs(model, tgt_dict, backend_name: str, batch: int, ks: List[int],
               settings: argparse.Namespace) -> Dict[str, Dict[int, float]]:
    """``{"verify": {N: ms}, "draft": {K: ms}}`` of one model at one batch size.

    The calls see what a decode's do: a source of ``--source`` tokens, a prefix
    of ``--past`` tokens in a cache as wide as the decode's at that K.
    """
    from nmt_specdec.decoding.backends import make_backend
    from nmt_specdec.decoding.drafters import DraftRequest

    generator = torch.Generator().manual_seed(settings.seed)

    def random_tokens(*shape: int) -> torch.Tensor:
        return torch.randint(tgt_dict.nspecial, len(tgt_dict), shape, generator=generator)

    backend = make_backend(backend_name, model, tgt_dict)
    src = random_tokens(batch, settings.source)
    src[:, -1] = tgt_dict.eos()
    net_input = {"src_tokens": src, "src_lengths": torch.full((batch,), settings.source)}
    past = settings.past
    limit = max(past, int(settings.max_len_a * settings.source + settings.max_len_b))
    calls: Dict[Hashable, Callable[[], object]] = {}
    with torch.no_grad():
        memory = backend.encode(net_input)
        verifier = backend.verifier()
        cross = verifier.cross_states(memory)
        for new in range(1, max(ks) + 2):
            cache = verifier.new_cache(batch, limit + new + 1)  # the loop's width at K = N-1
            calls[("verify", new)] = partial(verifier.verify, random_tokens(batch, new),
                                             torch.full((batch,), past), past, cache, cross,
                                             True)
        drafter = backend.drafter(tgt_dict.pad())
        drafter.start_batch({"net_input": net_input}, memory)
        prefix = torch.full((batch, limit + max(ks) + 2), tgt_dict.pad())
        prefix[:, : past + 1] = random_tokens(batch, past + 1)
        prefix[:, 0] = tgt_dict.eos()  # fairseq's BOS
        states = torch.randn(batch, verifier.embed.size(-1), generator=generator)
        for k in ks:
            request = DraftRequest(prefix, torch.full((batch,), past + 1),
                                   states.to(verifier.embed), torch.arange(batch), k)
            calls[("draft", k)] = partial(drafter.propose, request)
        measured = median_ms(calls, settings.repeats, settings.budget_s)
    return {kind: {n: ms for (name, n), ms in measured.items() if name == kind}
            for kind in ("verify", "draft")}


def load_sources(task, path: Path, spm_model: Optional[Path], count: int) -> List[torch.Tensor]:
    """The first ``count`` lines of ``path``, encoded for the checkpoint (with
    ``spm_model`` when given, else the lines are taken as already split)."""
    from nmt_specdec.evaluation.testset import read_lines

    lines = [line for line in read_lines(str(path), "--sentences-file") if line.strip()]
    lines = lines[:count]
    if not lines:
        raise UserError(f"--sentences-file {path} has no sentences")
    if spm_model is not None:
        import sentencepiece

        spm = sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
        lines = [" ".join(spm.encode(line, out_type=str)) for line in lines]
    return [task.source_dictionary.encode_line(line, add_if_not_exist=False).long()
            for line in lines]


def decode_costs(model, task, backend_name: str, sources: List[torch.Tensor], batch: int,
                 ks: List[int], settings: argparse.Namespace) -> Dict[str, Dict[int, float]]:
    """Host ms per iteration (K=0: greedy) and tokens per iteration (the head's, and
    the oracle's from greedy's output lengths) of the checkpoint's real decodes."""
    from nmt_specdec.decoding.backends import make_backend
    from nmt_specdec.decoding.generator import SpecDecGenerator
    from nmt_specdec.decoding.options import DecodingOptions, LengthRules
    from nmt_specdec.decoding.stats import SpecDecStats, oracle_tokens_per_iteration
    from nmt_specdec.evaluation.profiling import Profile, instrumented
    from nmt_specdec.evaluation.testset import make_batches

    cpu = torch.device("cpu")
    backend = make_backend(backend_name, model, task.target_dictionary)
    rules = LengthRules(max_len_a=settings.max_len_a, max_len_b=settings.max_len_b,
                        max_positions=model.max_decoder_positions())
    batches = make_batches(task, sources, batch, cpu)
    generators = {k: SpecDecGenerator(model, task.target_dictionary, DecodingOptions(k=k), rules,
                                      backend=backend) for k in [0, *ks]}
    host: Dict[int, List[float]] = {k: [] for k in generators}
    lengths: List[int] = []
    with torch.no_grad():
        for generator in generators.values():  # warm-up: exports, bindings, first shapes
            generator.generate([model], batches[0].sample)
        for _ in range(settings.decode_repeats):
            for k, generator in generators.items():  # interleaved, as the calls above
                generator.stats = SpecDecStats()
                gc.collect()
                gc.disable()  # a collection would land on whichever loop runs next
                try:
                    with instrumented(generator, device=cpu) as clock:
                        start = time.perf_counter()
                        outputs = [generator.generate([model], b.sample) for b in batches]
                        total = time.perf_counter() - start
                finally:
                    gc.enable()
                turns = sum(generator.stats.k_chosen.values())
                host[k].append(Profile(total=total, **clock.seconds).bookkeeping / turns)
                if k == 0:  # tokens include EOS, as the oracle counts them
                    lengths = [len(hyps[0]["tokens"]) for out in outputs for hyps in out]
    return {"host": {k: 1e3 * statistics.median(v) for k, v in host.items()},
            "head": {k: generators[k].stats.mean_accepted_tokens for k in ks},
            "oracle": {k: oracle_tokens_per_iteration(lengths, k) for k in ks}}


def _shape_flags(model, shape: Shape) -> List[str]:
    """fairseq flags of a random ``specdec_transformer`` of ``shape`` with the
    checkpoint's embedding sharing and draft-head layout (head dimension 64)."""
    cfg = model.cfg  # fairseq's TransformerConfig, which keeps the plugin's own options
    flags = ["--arch", "specdec_transformer"]
    for side in ("encoder", "decoder"):
        flags += [f"--{side}-layers", str(shape.layers), f"--{side}-embed-dim", str(shape.dim),
                  f"--{side}-ffn-embed-dim", str(shape.ffn),
                  f"--{side}-attention-heads", str(shape.dim // 64)]
    for name in ("draft_layers", "draft_block_size", "draft_vocab_size",
                 "draft_refine_layers", "draft_refine_steps"):
        if getattr(cfg, name, None) is not None:
            flags += ["--" + name.replace("_", "-"), str(getattr(cfg, name))]
    for name in ("untie_draft_output", "share_all_embeddings",
                 "share_decoder_input_output_embed"):
        if getattr(cfg, name, False):
            flags.append("--" + name.replace("_", "-"))
    return flags


def random_shape_model(model, task, shape: Shape, seed: int):
    """A random-weight model of ``shape`` over the checkpoint's dictionaries (built
    by the model class itself: the task would load its AR checkpoint into it)."""
    from fairseq import options
    from fairseq.models import build_model

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        "unused", "--task", "translation_specdec", "--criterion", "specdec_joint_loss",
        "--cpu", "--dropout", "0", *_shape_flags(model, shape)])
    torch.manual_seed(seed)  # the same weights each run: ONNX Runtime's export is reused
    return build_model(args, task).eval()


def expected_seconds(args: argparse.Namespace) -> float:
    """A rough estimate of the run time, printed before it starts."""
    measure = len(args.shapes) * len(args.batch_sizes) * (args.budget_s + 3)
    prepare = sum(PREPARE_S[name] for name in args.shapes)
    # ~15 output tokens per sentence at ~1 ms a loop turn (the shipped model).
    decode = (len(args.batch_sizes) * (args.decode_repeats + 1) * (args.max_k + 1)
              * args.sentences * 15e-3)
    return measure + prepare + decode + 10


def load_checkpoint(args: argparse.Namespace):
    """``(model, task)`` of ``--checkpoint``, with a draft head, eval mode."""
    from nmt_specdec import checkpoints

    path = Path(args.checkpoint)
    if not path.is_file():
        raise UserError(f"--checkpoint {path} does not exist")
    checkpoints.register_plugin()
    model, task = checkpoints.load(str(path), {"data": str(args.data or path.parent)})
    if not hasattr(model, "draft_head"):
        raise UserError(f"--checkpoint {path} has no draft head: the cost model times "
                        "its calls (add one with nmt-specdec-add-draft-head)")
    return model.eval(), task


def run(args: argparse.Namespace) -> Dict:
    """Measures, prints the table and (``--out``) writes it; returns
    ``{"header", "settings", "rows", "files", "seconds"}``."""
    from nmt_specdec.decoding.backends import check_backend

    check_backend(args.backend)
    started = time.perf_counter()
    torch.set_num_threads(args.threads)  # onnxruntime's sessions take torch's count
    model, task = load_checkpoint(args)
    print(f"expected run time: about {expected_seconds(args) / 60:.0f} min "
          "(less once the random shapes' ONNX exports are cached)", flush=True)
    ks = list(range(1, min(args.max_k, model.draft_block_size) + 1))
    if args.spm_model and not Path(args.spm_model).is_file():
        raise UserError(f"--spm-model {args.spm_model} does not exist")
    spm = Path(args.spm_model or Path(args.checkpoint).parent / "spm.model")
    sources = load_sources(task, Path(args.sentences_file), spm if spm.is_file() else None,
                           args.sentences)
    header = machine_header(args.threads, args.backend)
    print(format_header(header), flush=True)
    tokens = {batch: decode_costs(model, task, args.backend, sources, batch, ks, args)
              for batch in args.batch_sizes}
    rows: List[Dict] = []
    for name in args.shapes:
        shape = SHAPES[name]
        measured = model if shape is None else random_shape_model(model, task, shape,
                                                                   args.seed)
        described = {"name": (f"checkpoint ({Path(args.checkpoint).name})" if shape is None
                              else f"{shape.title} ({RANDOM_LABEL})"),
                     "random": shape is not None}
        for batch in args.batch_sizes:
            costs = {**call_costs(measured, task.target_dictionary, args.backend, batch, ks,
                                  args), "host": tokens[batch]["host"]}
            rows += cost_rows(described, batch, costs, tokens[batch])
        del measured  # a big shape's weights (and its sessions) before the next one's
        gc.collect()
    print(format_table(rows), flush=True)
    print("\n".join(verdicts(rows)), flush=True)
    settings = {name: getattr(args, name) for name in (
        "checkpoint", "shapes", "backend", "threads", "batch_sizes", "max_k", "past", "source",
        "repeats", "budget_s", "sentences_file", "sentences", "decode_repeats")}
    settings = {key: str(value) if isinstance(value, Path) else value
                for key, value in settings.items()}
    files = write_outputs(Path(args.out), header, rows, settings) if args.out else []
    for path in files:
        print(f"wrote {path}")
    seconds = time.perf_counter() - started
    print(f"took {seconds:.0f} s", flush=True)
    return {"header": header, "settings": settings, "rows": rows, "files": files,
            "seconds": seconds}


def build_parser() -> argparse.ArgumentParser:
    from nmt_specdec.data.steps import OneLineParser

    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--data", default=None,
                   help="directory with the dictionaries (default: the checkpoint's)")
    p.add_argument("--spm-model", default=None,
                   help="SentencePiece model of the sentences (default: spm.model beside "
                        "the checkpoint, if any; else the lines are taken as split)")
    p.add_argument("--sentences-file", default=str(DEFAULT_SENTENCES),
                   help="raw source sentences decoded for tok/iter and host time")
    p.add_argument("--sentences", type=int, default=40)
    p.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    p.add_argument("--backend", choices=("onnxruntime", "torch"), default="onnxruntime")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1])
    p.add_argument("--max-k", type=int, default=4, help="largest K (at most the head's)")
    p.add_argument("--past", type=int, default=20, help="cached prefix of the verify calls")
    p.add_argument("--source", type=int, default=20, help="source tokens of the timed calls")
    p.add_argument("--repeats", type=int, default=1000, help="timed rounds of calls at most")
    p.add_argument("--budget-s", type=float, default=20.0,
                   help="seconds of timed rounds per shape and batch size (at least "
                        f"{MIN_ROUNDS} rounds)")
    p.add_argument("--decode-repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=None, help="directory for cost_model.md/.json/.png")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    from nmt_specdec.data.steps import report_user_errors

    args = build_parser().parse_args(argv)
    for flag in ("sentences", "max_k", "repeats", "decode_repeats", "threads", "source"):
        if getattr(args, flag) < 1:
            print(f"error: --{flag.replace('_', '-')} must be >= 1", file=sys.stderr)
            return 2
    if min(args.batch_sizes) < 1 or args.past < 0:
        print("error: --batch-sizes must be >= 1 and --past >= 0", file=sys.stderr)
        return 2
    return report_user_errors(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
