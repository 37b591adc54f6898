"""Data builders: tasks, tool environments, LLM backends, the agent loop and rollouts.

Dependencies point one way: ``data_builders`` never imports ``trainers``.
"""
