"""Helpers for tools/gen_logit_goldens.py (golden logits for tern's forward-pass tests)."""
