"""Trainer Operator shared library (no controller logic)."""
