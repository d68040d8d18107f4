"""Helpers shared by the bench scripts (not a benchmark: ``make bench`` runs only bench/*.py)."""
