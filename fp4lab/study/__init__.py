"""Pretraining studies of the training recipes (needs torch): a byte-level GPT trained under each recipe.

Modules, one job each: ``model`` (the GPT and its sizes), ``data`` (corpus, train / held-out split, batches),
``train`` (``TrainConfig``, ``train``: one resumable run with logs), ``diagnostics`` (alpha per layer and operand,
operand captures), ``logs`` (atomic, link-safe writers), ``progress``, ``runfolder`` (safe labels, the run-folder
lock, the code version), ``driver`` (plan files: run what is missing), ``pack`` (a slice's results in two small
files), ``defaults`` (the study's plans and recipe files), ``summary`` (relative loss gaps, paired statistics,
version and duplicate guards) and ``plots``.
Command line: ``examples/pretrain.py``; guide: docs/study.md.
"""
