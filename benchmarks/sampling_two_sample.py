"""fairseq-interactive's sampling with and without ``--spec-decoding``: the same distribution?

Feeds one sentence ``--count`` times to ``fairseq-interactive --sampling
--sampling-topk K`` twice, with fairseq's own generator and with speculative
sampling (the plugin, the shipped base model and its head), and prints a
chi-square two-sample test of the two output frequency tables (outputs seen
fewer than 10 times in both runs together pooled into one cell).

Example (from the repository root)::

    python benchmarks/sampling_two_sample.py --sentence "Die Datei konnte nicht geöffnet werden."
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import List, Optional

MODEL = "models/gettext-de-en-base"


def interactive(lines: Path, model: str, topk: int, seed: int, spec_k: Optional[int]) -> Counter:
    """Output frequencies of ``fairseq-interactive`` over the file ``lines``."""
    joined = subprocess.run(["nmt-specdec-join-model", model], capture_output=True, text=True,
                            check=True).stdout.strip()  # the shipped shards, joined once
    command = ["fairseq-interactive", model, "--path", joined, "-s", "de", "-t", "en",
               "--beam", "1", "--sampling", "--sampling-topk", str(topk), "--seed", str(seed),
               "--bpe", "sentencepiece", "--sentencepiece-model", f"{model}/spm.model",
               "--buffer-size", "1000", "--batch-size", "100", "--cpu"]
    if spec_k is not None:
        command += ["--user-dir", "fairseq_plugins", "--task", "translation_specdec",
                    "--draft-head", f"{model}/head.pt", "--spec-decoding", "--spec-k", str(spec_k)]
    with lines.open() as stdin:
        out = subprocess.run(command, stdin=stdin, capture_output=True, text=True, check=True)
    return Counter(line.split("\t", 2)[2] for line in out.stdout.splitlines()
                   if line.startswith("D-"))


def two_sample(a: Counter, b: Counter) -> str:
    from scipy.stats import chi2_contingency

    common = [o for o in set(a) | set(b) if a[o] + b[o] >= 10]
    rest = [sum(c[o] for o in c if o not in common) for c in (a, b)]
    result = chi2_contingency([[a[o] for o in common] + [rest[0]],
                               [b[o] for o in common] + [rest[1]]])
    return (f"chi-square two-sample over {len(common) + 1} cells: statistic "
            f"{result.statistic:.1f}, dof {result.dof}, p = {result.pvalue:.3f}")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sentence", default="Die Farbpalette kann nicht unter „%1“ gespeichert "
                   "werden.")
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("--topk", type=int, default=10)
    p.add_argument("--spec-k", type=int, default=2)
    p.add_argument("--seeds", type=int, nargs=2, default=[1, 2],
                   help="fairseq's run's seed, then SpecDec's")
    p.add_argument("--model", default=MODEL)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        lines = Path(tmp) / "lines.de"
        lines.write_text((args.sentence + "\n") * args.count, encoding="utf-8")
        stock = interactive(lines, args.model, args.topk, args.seeds[0], None)
        spec = interactive(lines, args.model, args.topk, args.seeds[1], args.spec_k)
    print(f"{args.sentence!r} x {args.count}, --sampling --sampling-topk {args.topk}: "
          f"{len(stock)} distinct outputs (fairseq), {len(spec)} (--spec-decoding --spec-k "
          f"{args.spec_k}); {two_sample(stock, spec)}")
    for output, count in stock.most_common(3):
        print(f"  {count:5d} {spec[output]:5d}  {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
