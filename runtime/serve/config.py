"""The gated endpoint's entry config (``serve``) and its ``upstream`` group: what runtime.serve reads."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from data_builders.backends.config import ModelConfig
from data_builders.config import CheckpointsConfig, per_gate
from data_builders.config_fields import param, required
from data_builders.gates import ON_ERROR_MODES
from data_builders.protocol import PREFILL_STYLES
from recipes.schema import store

@dataclass
class ServeUpstream:
    """``upstream=http``: an OpenAI-compatible server (vLLM, SGLang, a hosted API) behind the endpoint."""
    kind: str = param("http", "the upstream", choices=("http",))
    base_url: str = param("http://127.0.0.1:8000/v1", "the upstream's /v1 URL")
    api_key_env: Optional[str] = param(None, "the variable holding the upstream's own key, e.g. OPENAI_API_KEY; "
                                             "null: none")
    models: Optional[List[str]] = param(None, "model ids clients may ask for; null: the upstream's /v1/models")
    timeout_s: float = param(120.0, "a whole upstream generation; past it the client gets 504", gt=0)
    connect_timeout_s: float = param(5.0, "connecting to the upstream", gt=0)
    retries: int = param(2, "connection attempts retried; a request the upstream received is never resent", ge=0)
    max_connections: int = param(64, "open connections to the upstream", ge=1)


@dataclass
class ServeLocalUpstream:
    """``upstream=local``: toolwise's own backend (model + backend groups) in-process."""
    kind: str = param("local", "the upstream", choices=("local",))
    models: Optional[List[str]] = param(None, "ids clients may ask for; null: the policy's model id")
    max_tokens: int = param(256, "completion budget when a request sets neither max_tokens nor "
                                 "max_completion_tokens", ge=1)
    temperature: float = param(0.0, "when a request sets none (toolwise evaluates greedy; OpenAI's own default is "
                                    "1)", ge=0)
    max_context: Optional[int] = param(None, "tokens of prompt and completion together; a longer prompt is refused "
                                             "(400), a larger max_tokens capped to the room left; null: the "
                                             "model's max_position_embeddings", ge=2)
    slice_tokens: int = param(32, "tokens generated per turn of the one policy: a long generation yields the "
                                  "policy to waiting requests between slices, and stops at the next one when its "
                                  "client leaves or the server shuts down", ge=1)
    prefill_chunk_tokens: int = param(512, "a prompt is prefilled in chunks of this many tokens, taking turns with "
                                           "other requests (a long prompt no longer holds the policy for its whole "
                                           "prefill, and is cancelled between chunks); 0: one forward pass", ge=0)
    constrained_calls: Optional[bool] = param(None, "a tool_choice that forces a call (required, or a named "
                                                    "function) is decoded under the call's grammar (xgrammar), so "
                                                    "the turn is that call, well formed; null: when xgrammar is "
                                                    "installed (.[constrained]); false: the call's opening only")


ServeTaus = per_gate("ServeTaus", lambda g: (Optional[float], param(None, "null: the checkpoint's calibrated τ",
                                                                       ge=0, le=1)),
                     doc="A gate's decision threshold at the endpoint (``p >= τ`` takes its first action: use, "
                         "execute, continue).")


ServeSupport = per_gate("ServeSupport", lambda g: (Optional[float], param(
    g.support_z, "an input further than this many training standard deviations from the controller's training "
                 "data gets the open action (commit, execute, no prefill), reason out_of_support; null: always decide",
    gt=0)), doc="A gate's support limit at the endpoint (runtime.controller_hooks.decide).")


ServeModes = per_gate("ServeModes", lambda g: (str, param(
    "enforce", "enforce: the gate's decisions are acted on; shadow: decided, recorded (toolwise.decisions, headers, "
               "toolwise_shadow_decisions_total) and never acted on: the response is the ungated one",
    choices=("enforce", "shadow"))), doc="A gate's mode at the endpoint.")


@dataclass
class ServeGateOptions:
    prefill_style: str = param("soft", "the probe's response prefill: soft (a sentence) | hard (a forced prefix)",
                               choices=PREFILL_STYLES)
    taus: ServeTaus = param(ServeTaus(), "each gate's τ, e.g. an operating point chosen on held-out tasks")
    modes: ServeModes = param(ServeModes(), "each gate's mode: enforce, or shadow (what it would do, on live "
                                            "traffic, without doing it)")
    support_z: ServeSupport = param(ServeSupport(), "each gate's support limit: past it the gate does not act on "
                                                    "its extrapolation")
    policy: Optional[str] = param(None, "the upstream policy's fingerprint: gates trained on another policy refuse "
                                        "to load")
    strict: bool = param(True, "false: skip the policy contract check")
    on_error: str = param("open", "a gate that raises: open = execute the call / commit the answer; closed = skip "
                                  "/ continue", choices=ON_ERROR_MODES)
    max_reasks: int = param(2, "upstream re-asks after skipped calls, per request", ge=0)
    max_continues: int = param(1, "G-STEP verification rounds per conversation", ge=0)
    logprobs: Optional[bool] = param(None, "request token log-probs from the upstream; null: when a gate that "
                                           "reads them (G-STEP) is set")
    concurrency: int = param(1, "decisions computed at once (torch already uses every core; parallel ones "
                                "contend)", ge=1)


def _serve_gate(gate) -> tuple:
    where = ("upstream=local only: on each conversation's first turn (it reads the policy's hidden states)"
             if gate.moment == "pre_generation" else "null: off")
    return Optional[str], param(None, f"an exported checkpoint dir (checkpoints/{gate.name}/<run>); {where}")


ServeGates = per_gate("ServeGates", _serve_gate, base=ServeGateOptions,
                      doc="``gates``: each gate's checkpoint (``gates.<gate>``) and how the server applies them.")


@dataclass
class ServeAuth:
    env: Optional[str] = param("TOOLWISE_API_KEYS", "comma-separated bearer keys; with none (and no file) only a "
                                                    "loopback host is served")
    file: Optional[str] = param(None, "one key per line; a line starting with # is a comment")
    admin_env: Optional[str] = param("TOOLWISE_ADMIN_KEY", "the environment variable holding the admin key that "
                                                          "POST /admin/reload requires (unset or empty: the route is "
                                                          "off; SIGHUP reloads either way)")


@dataclass
class ServeLimits:
    max_body_bytes: int = param(1048576, "a request body's size", ge=1)
    max_messages: int = param(256, "messages in one request", ge=1)
    max_json_depth: int = param(64, "nesting of the request's JSON (OpenAI requests, tool schemas included, stay "
                                    "far below; deeper is refused with 400 before anything recurses into it)", ge=2)
    header_timeout_s: float = param(10.0, "the deadline a reverse proxy in front should give a request's head "
                                          "(nginx client_header_timeout): uvicorn has no setting for it, so the "
                                          "server warns at start on a non-loopback host and the guide's proxy "
                                          "section uses this value", gt=0)
    body_timeout_s: float = param(30.0, "reading a request's body; past it 408 and the connection closes", gt=0)
    keep_alive_s: float = param(5.0, "an idle kept-alive connection is closed after this (uvicorn's "
                                     "timeout_keep_alive)", gt=0)
    shutdown_timeout_s: float = param(5.0, "on SIGTERM, in-flight requests get this long, then are cancelled "
                                           "(uvicorn's timeout_graceful_shutdown)", gt=0)


@dataclass
class ServeCapture:
    """Traffic capture (runtime/serve/capture.py): opt-in, off the request path."""
    dir: Optional[str] = param(None, "where each request's record is appended (JSON lines); null: no capture")
    queue_size: int = param(1024, "records waiting for the writer; past it a record is dropped and counted "
                                  "(toolwise_capture_dropped_total), never a slower request", ge=1)
    max_file_bytes: int = param(64 * 2**20, "a capture file rotates past this size", ge=1024)
    flush_s: float = param(0.01, "the writer takes what is queued every this many seconds (one wake-up per "
                                 "period, not per request: a wake-up per record took the event loop's GIL "
                                 "often enough to cost ~1 ms p50); a killed server loses at most this period's "
                                 "records", gt=0)
    fsync_s: float = param(1.0, "the writer fsyncs at most this long after a write (every write is flushed to "
                                "the OS at once: a killed server loses only what is queued)", gt=0)
    redact: List[str] = param([], "regular expressions whose matches in any captured string become [REDACTED] "
                                  "before anything reaches disk")
    redactor: Optional[str] = param(None, "module:function given each record before it is written; returns the "
                                          "record to store, or None to drop it")


@dataclass
class ServeConfig:
    host: str = param("127.0.0.1", "another address needs an API key (auth), or the server refuses to start")
    port: int = param(8080, "the port", ge=1, le=65535)
    log_level: str = param("info", "uvicorn's", choices=("critical", "error", "warning", "info", "debug", "trace"))
    upstream: Any = required("http | local: the upstream group")
    model: ModelConfig = required("upstream=local: the policy served (the model group)")
    backend: Any = required("upstream=local: its engine (hf | vllm)")
    checkpoints: CheckpointsConfig = required("the committed checkpoints: the checkpoints group")
    gates: ServeGates = param(ServeGates(), "the gates")
    auth: ServeAuth = param(ServeAuth(), "client keys")
    limits: ServeLimits = param(ServeLimits(), "request limits")
    capture: ServeCapture = param(ServeCapture(), "traffic capture (opt-in: capture.dir)")


# what this module adds to Hydra's ConfigStore, (group or None for an entry config, name, schema)
SCHEMAS = [
    ("upstream", "http_schema", ServeUpstream),
    ("upstream", "local_schema", ServeLocalUpstream),
    (None, "serve_schema", ServeConfig),
]
store(SCHEMAS)
