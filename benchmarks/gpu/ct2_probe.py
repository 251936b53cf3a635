"""Does CTranslate2 decode on this machine's GPU? (before ``nmt-specdec-evaluate --ct2``)

The CTranslate2 4.x wheel is built for CUDA 12 and loads ``libcublas.so.12`` when it
first multiplies on the GPU; the GPU machine has CUDA 13 (torch cu130). This probe
converts the shipped model's verifier the way ``--ct2`` does and translates one
sentence on ``--device`` with each compute type. Exit 0 and ``"ok": true`` in
the JSON when float32 works there.

``--shim DIR`` only links ``DIR/libcublas.so.12`` to the machine's newest
``libcublas.so.*`` (found beside torch's CUDA libraries) and exits; the caller
then reruns the probe with ``LD_LIBRARY_PATH=DIR`` (the loader reads it at
start-up only), and decodes with that setting if the probe passes.

Usage: ``python3 benchmarks/gpu/ct2_probe.py --checkpoint models/gettext-de-en-tiny/model.pt
--data DIR --out DIR [--device cuda] [--shim DIR]``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import site
import sys
import time
from pathlib import Path


def find_cublas() -> list[str]:
    """``libcublas.so.N`` files of this machine, newest major version first."""
    roots = [*site.getsitepackages(), *sys.path, "/usr/local/cuda/lib64",
             "/usr/local/cuda/targets", "/usr/lib/x86_64-linux-gnu", "/usr/local/nvidia/lib64", "/opt"]
    found = set()
    for root in dict.fromkeys(r for r in roots if r and os.path.isdir(r)):
        for pattern in ("libcublas.so.[0-9]*", "*/libcublas.so.[0-9]*", "*/*/libcublas.so.[0-9]*",
                        "*/*/*/libcublas.so.[0-9]*", "*/*/*/*/libcublas.so.[0-9]*"):
            found.update(os.path.realpath(p) for p in glob.glob(os.path.join(root, pattern)))
    return sorted(found, key=lambda p: [int(x) for x in p.split(".so.")[-1].split(".") if x.isdigit()],
                  reverse=True)


def make_shim(shim: Path) -> str | None:
    shim.mkdir(parents=True, exist_ok=True)
    candidates = [p for p in find_cublas() if ".so.12" not in p]
    if not candidates:
        return None
    link = shim / "libcublas.so.12"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(candidates[0])
    return candidates[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint")
    p.add_argument("--data", help="binarized data dir with the dictionaries")
    p.add_argument("--out")
    p.add_argument("--device", default="cuda")
    p.add_argument("--shim", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None, help="write the result here too")
    args = p.parse_args(argv)
    result: dict = {"device": args.device, "ld_library_path": os.environ.get("LD_LIBRARY_PATH", ""),
                    "ok": False}
    if args.shim is not None:
        found = find_cublas()
        target = make_shim(args.shim)
        print(json.dumps({"shim": str(args.shim / "libcublas.so.12"), "target": target,
                          "cublas_found": found}, indent=1))
        return 0 if target else 1
    if not (args.checkpoint and args.data and args.out):
        p.error("--checkpoint, --data and --out are required (except with --shim)")
    try:
        import ctranslate2

        result["version"] = ctranslate2.__version__
        if args.device == "cuda":
            result["cuda_devices"] = ctranslate2.get_cuda_device_count()
        result["supported"] = sorted(ctranslate2.get_supported_compute_types(args.device))
        from nmt_specdec.checkpoints import install_safe_loading  # as the evaluation loads
        from nmt_specdec.evaluation.ct2 import convert_verifier

        install_safe_loading()

        start = time.monotonic()
        model_dir = convert_verifier(args.checkpoint, args.data, "de", "en", args.out)
        result["convert_seconds"] = round(time.monotonic() - start, 1)
        result["compute_types"] = {}
        for compute_type in ("float32", "float16", "int8"):
            if compute_type not in result["supported"]:
                continue
            try:
                translator = ctranslate2.Translator(model_dir, device=args.device,
                                                    compute_type=compute_type)
                out = translator.translate_batch([["▁Datei", "▁öffnen"]], beam_size=1,
                                                 max_decoding_length=10)
                result["compute_types"][compute_type] = " ".join(out[0].hypotheses[0])
            except Exception as exc:  # noqa: BLE001 - the probe reports whatever failed
                result["compute_types"][compute_type] = f"ERROR {type(exc).__name__}: {exc}"
        result["ok"] = not str(result["compute_types"].get("float32", "ERROR")).startswith("ERROR")
    except Exception as exc:  # noqa: BLE001
        result["error"] = f"{type(exc).__name__}: {exc}"
    text = json.dumps(result, indent=1, ensure_ascii=False)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
