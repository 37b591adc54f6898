"""Trainers and the evaluator. May import ``data_builders`` and ``controllers``; never the reverse."""
