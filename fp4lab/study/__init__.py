"""Pretraining studies of the training recipes: a GPT-style decoder and its configurations (needs torch)."""
