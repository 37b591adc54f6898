"""Shared fixtures. Models are built locally (a tiny random Llama) or come from the embedded package;
nothing is downloaded."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

REPO = Path(__file__).resolve().parents[1]
# The benchmark files (When2Tool's task files, GSM8K's train.jsonl) under <dir>/data/: a developer checkout keeps
# them beside the repository; TOOLWISE_TEST_DATA names another <dir>. Tests that need them skip without them.
SHARED = Path(os.environ.get("TOOLWISE_TEST_DATA", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    # why (here and below): this file loads for every test, most of which need no model; importing torch and
    # transformers at the top would cost every run ~5 s, and would read the HF_* variables before they are set.
    from tests.tiny_models import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), hidden_size=64, num_layers=2, seed=0)


@pytest.fixture(scope="session")
def tiny_backend(tiny_model_dir):
    from data_builders.backends.loading import load_backend

    return load_backend(str(tiny_model_dir), max_batch_size=4)


@pytest.fixture(scope="session")
def embedded_backend():
    from data_builders.backends.loading import load_backend

    return load_backend("smollm2")
