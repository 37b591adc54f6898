"""Prometheus metrics of one endpoint (prometheus_client). A registry per app, so two apps in one process (tests,
the load benchmark) count apart."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# Upstream generation takes 0.1 s to minutes; a gate decision 0.1 ms to tens of ms.
UPSTREAM_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
GATE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)


class Metrics:
    def __init__(self):
        self.registry = r = CollectorRegistry()
        self.requests = Counter("toolwise_requests", "HTTP requests by route and status", ["route", "status"],
                                registry=r)
        self.errors = Counter("toolwise_errors", "Refused or failed requests by status and error code",
                              ["status", "code"], registry=r)
        self.decisions = Counter("toolwise_gate_decisions", "Gate decisions applied, by gate and action",
                                 ["gate", "action"], registry=r)
        self.shadow_decisions = Counter("toolwise_shadow_decisions", "Decisions of gates in shadow mode, by gate and "
                                        "the action they would have taken (none was)", ["gate", "action"],
                                        registry=r)
        self.capture_records = Counter("toolwise_capture_records", "Requests written to the capture store",
                                       registry=r)
        self.capture_dropped = Counter("toolwise_capture_dropped", "Requests not captured: the capture queue was "
                                       "full (never a slower request)", registry=r)
        self.capture_failed = Counter("toolwise_capture_failed", "Requests the capture could not store (serialize "
                                      "or write errors)", registry=r)
        self.skipped_calls = Counter("toolwise_skipped_calls", "Proposed tool calls the ToolGate skipped",
                                     registry=r)
        self.continues = Counter("toolwise_continues", "Verification rounds G-STEP added", registry=r)
        self.malformed_calls = Counter("toolwise_malformed_calls", "Turns that opened a tool call nobody could "
                                       "parse (each in toolwise.malformed_calls; the local policy's markup is kept "
                                       "out of the reply)", registry=r)
        self.gate_errors = Counter("toolwise_gate_errors", "Gate calls that raised", ["gate"], registry=r)
        self.gate_reloads = Counter("toolwise_gate_reloads", "Gate reloads (SIGHUP or POST /admin/reload) by result",
                                    ["result"], registry=r)
        self.upstream_latency = Histogram("toolwise_upstream_latency_seconds", "Upstream chat completion latency",
                                          buckets=UPSTREAM_BUCKETS, registry=r)
        self.gate_latency = Histogram("toolwise_gate_latency_seconds", "Gate decision latency", ["gate"],
                                      buckets=GATE_BUCKETS, registry=r)
