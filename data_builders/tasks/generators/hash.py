"""HashEnv tasks (docs/guide.md#when2tool-tasks-and-gold-formats): digests of common strings / short phrases / random
strings.

Gold comes from ``hashlib`` and a separate implementation of the custom hashes written from the
benchmark's table of constants (not from the environment), so the oracle test cross-checks the two.
"""
from __future__ import annotations

import hashlib
import random
import string

from .common import Draw, EnvGenerator

TOOLS = ("compute_hash",)
_SUFFIX = "Answer with only the hex string."
_CUSTOM_NOTE = "This is a custom hash algorithm available via the compute_hash tool."

# Easy: short, very common strings (what a model may have memorised digests of), and ''.
_COMMON = (
    "a b c x z 0 1 7 42 99 100 123 1234 2024 abc xyz qwerty pass password admin root user guest login "
    "logout test demo hello hi hey yes no ok on off up go run sit win lose cat dog cow pig fox owl bee ant "
    "sun moon star sky sea red blue green gold pink gray black white one two ten foo bar baz key lock "
    "door home java rust code data file name text word book pen cup tea milk egg ice fire rain snow "
    "wind tree leaf rock sand hot cold new old big small top end start stop open shut left right"
).split()
# Medium: short technical phrases, one to three words.
_PHRASES = (
    "attention head", "gradient clipping", "learning rate", "weight decay", "dropout rate",
    "batch normalization", "cross entropy", "softmax layer", "hidden state", "token budget",
    "context window", "prompt template", "reward model", "policy gradient", "value function",
    "replay buffer", "target network", "mixed precision", "data parallel", "model parallel",
    "pipeline stage", "sparse mixture", "expert routing", "kv cache", "rotary embedding",
    "residual stream", "feature map", "convolution kernel", "max pooling", "stride length",
    "early stopping", "warmup steps", "cosine schedule", "adam optimizer", "momentum term",
    "label smoothing", "data augmentation", "random crop", "image patch", "vision encoder",
    "text decoder", "language model", "speech recognition", "object detection", "graph network",
    "node embedding", "edge weight", "decision tree", "random forest", "boosted trees",
    "support vector", "kernel trick", "principal components", "cluster centroid", "nearest neighbor",
    "vector database", "semantic search", "retrieval augmented", "chain of thought", "tool calling",
    "function schema", "json output", "unit test", "code review", "merge conflict", "pull request",
    "build cache", "docker image", "cloud storage", "load balancer", "rate limiter", "message queue",
    "event stream", "primary key", "foreign key", "query planner", "index scan", "hash join",
    "tokenization", "quantization", "distillation", "finetuning", "pretraining", "inference",
    "alignment", "calibration", "perplexity", "regularization", "normalization", "activation",
    "backbone", "scheduler", "checkpointing", "sharding", "profiling", "benchmarking",
    "hyperparameter", "overfitting", "underfitting", "generalization", "interpretability",
)
_MEDIUM_ALGOS = ("SHA256", "SHA1", "MD5")
_ALNUM = string.ascii_letters + string.digits

# The benchmark's custom hashes as (offset in hex, multiplier in decimal), transcribed from its table
# (docs/guide.md#when2tool-environments).
_CUSTOM_SPEC = {
    "FNV1A_CUSTOM": ("cbf29c3a299ccc67", 1099511628249),
    "DJB2_CUSTOM": ("abcd0731", 47),
    "SDBM_CUSTOM": ("1f2e3d4c5b6a7980", 65641),
    "MURMUR_CUSTOM": ("95c9e361", 1099511628308),
    "JENKINS_CUSTOM": ("7a6b5c4d3e2f1001", 6364136223846793018),
}


def reference_hash(text: str, algorithm: str) -> str:
    """Lowercase hex digest of ``text`` (UTF-8) for an upper-case When2Tool algorithm name."""
    if algorithm in _CUSTOM_SPEC:
        offset_hex, prime = _CUSTOM_SPEC[algorithm]
        h = int(offset_hex, 16)
        for byte in text.encode("utf-8"):
            h = (h ^ byte) * prime % 2**64
        return "%016x" % h
    return hashlib.new(algorithm.lower(), text.encode("utf-8")).hexdigest()


def make(difficulty: str, r: random.Random) -> Draw:
    if difficulty == "easy":
        algo = r.choice(("MD5", "SHA1"))
        # '' is rare in When2Tool (about one task in 70 per algorithm) and phrased specially.
        text = "" if r.random() < 0.03 else r.choice(_COMMON)
        subject = "the empty string ''" if text == "" else f"'{text}'"
        instruction = f"What is the {algo} hash of {subject}? {_SUFFIX}"
    elif difficulty == "medium":
        algo, text = r.choice(_MEDIUM_ALGOS), r.choice(_PHRASES)
        instruction = f"What is the {algo} hash of '{text}'? {_SUFFIX}"
    else:
        algo = r.choice(tuple(_CUSTOM_SPEC))
        text = "".join(r.choice(_ALNUM) for _ in range(r.randint(3, 15)))
        instruction = f"What is the {algo} hash of '{text}'? {_CUSTOM_NOTE} {_SUFFIX}"
    return instruction, reference_hash(text, algo), {}


GENERATOR = EnvGenerator("HashEnv", "hash", tools=lambda difficulty: TOOLS, make=make)
