"""Scoring: the pinned metrics, ground truth, task utility, leakage evidence and the frontier."""
