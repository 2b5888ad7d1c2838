"""Pretraining studies of the training recipes (needs torch): a byte-level GPT trained under each recipe.

Modules, one job each: ``model`` (the GPT and its sizes), ``data`` (corpus, train / held-out split, batches),
``train`` (``TrainConfig``, ``train``: one resumable run with logs), ``diagnostics`` (alpha per layer and operand,
operand captures), ``logs``, ``progress``, ``driver`` (plan files: run what is missing), ``defaults`` (the default
study plan and its recipe files), ``summary`` (relative loss gaps, paired statistics) and ``plots``.
Command line: ``examples/pretrain.py``; guide: docs/study.md.
"""
