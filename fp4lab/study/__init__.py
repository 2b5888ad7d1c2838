"""Pretraining studies of the training recipes (needs torch): a byte-level GPT trained under each recipe.

Modules, one job each: ``model`` (the GPT and its sizes), ``data`` (corpus, train / held-out split, batches),
``config`` (``TrainConfig``: one run's settings and their checks), ``train`` (``train``: one resumable run with
logs), ``distributed`` (the same run under torchrun, DDP or FSDP2), ``diagnostics`` (alpha per layer and operand,
operand captures), ``captures`` (the RHT diagnostics of captured operands), ``logs`` (atomic, link-safe writers),
``progress``, ``runfolder`` (safe labels, the run-folder lock, the code version), ``driver`` (plan files: run what
is missing), ``pack`` (a slice's results in two small files), ``defaults`` (the study's plans and recipe files),
``summary`` (relative loss gaps, paired statistics, version and duplicate guards), ``stats`` (paired t-tests,
Holm's adjustment, seeds needed), ``crossings`` (when runs reach given loss levels, exploratory) and ``plots``.
Command line: ``examples/pretrain.py``; guide: docs/study.md.
"""
