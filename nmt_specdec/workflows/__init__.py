"""Workflows that use a model (the corpora themselves live in ``nmt_specdec.data``).

Modules:
    quickstart: ``make quickstart``'s command line; its two modes are
        quickstart_pretrained (decode with the shipped model) and
        quickstart_train (train a tiny model from scratch); quickstart_report
        holds what both share.
    add_draft_head: ``nmt-specdec-add-draft-head`` (distil, train the head onto
        a frozen verifier, check it, report acceptance), with head_report.
    distill: sequence-level distillation of a binarized split.
    train_recipe: ``fairseq-train`` from a Hydra recipe with a time budget.
"""
