"""Learned controllers (probes, pre-call gates, continue/commit gates).

Pure torch: features in, probability out. Imports neither ``data_builders`` nor ``trainers``.
"""
