"""Data recipes: turn public corpora into fairseq-binarized De-En data.

Modules:
    ding: parse the Ding German-English dictionary into sentence pairs.
    mo: read gettext ``.mo`` catalogs (stdlib only).
    gettext_recipe: the gettext De-En recipe over Debian's German catalogs
        (with gettext_packages, gettext_sources, gettext_clean, gettext_split).
    splits: dedupe, filter and split pairs into train/valid/test.
    card: length statistics and the ``DATA_CARD.md`` writer.
    spm: joint SentencePiece training, encoding and fairseq binarization.
    steps: small helpers shared by the recipes (errors, atomic writes,
        reusable-step stamps).
    wmt14: the WMT14 De-En recipe (needs internet or pre-downloaded archives).

Workflows that use a model (quickstart, distillation, add-draft-head,
training) live in :mod:`nmt_specdec.workflows`.

The command-line entry points are the console scripts ``nmt-specdec-prepare-ding``,
``nmt-specdec-prepare-gettext`` and ``nmt-specdec-prepare-wmt14``.
"""

from nmt_specdec.data.steps import RecipeError

__all__ = ["RecipeError"]
