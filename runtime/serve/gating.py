"""One gated chat completion: ask the upstream, let the gates decide on the turn it proposes, re-ask when they
say so, and record every decision.

* a proposed tool call goes through the ToolGate; when every call of the turn is skipped, the upstream is
  re-asked with the turn and toolwise's skipped-call tool message for each call (what the agent loop feeds back on
  a skip), up to ``max_reasks`` times; calls the gate lets execute go back to the client, which runs its own tools
  (the server never executes one). Skipped calls in a turn that also has executed ones are dropped from it.
* a final answer, boxed or plain (the text the client receives), goes through G-STEP (with its token
  log-probs); *continue* appends toolwise's verification prompt and re-asks, up to ``max_continues`` verification
  rounds per conversation (a verification prompt already in the client's messages counts).
* with ``upstream=local`` (the policy in this process) a conversation's first turn that offers tools goes through
  Probe&Prefill (a request without tools has no tool decision to make: no probe): the probe reads the policy's
  hidden states of the rendered prompt and picks the response prefill (``gates.prefill_style``) the generation
  resumes from; a soft prefill steers the generation and is never part of the returned message. Those states
  exist only inside the upstream's generation, so the upstream calls this layer's probe step
  (:meth:`Gater.first_turn`) between rendering and generating.
* a gate that raises: ``on_error=open`` (default) applies execute / commit (the probe: no prefill), ``closed``
  skip / continue (the probe: the skip prefill), one rule for the three (:data:`ON_ERROR`); either way the
  decision is recorded with ``action: "error"``.

The messages the server added (skipped turns, verification prompts) come back in ``toolwise.injected`` so a
client keeping the transcript can splice them in before the returned turn."""
from __future__ import annotations

import time
from collections import Counter
from functools import partial
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from anyio import CapacityLimiter, to_thread

from data_builders.agent import prompts as P
from data_builders.environments.base import serialize
from data_builders.gates import MOMENTS, ON_ERROR_MODES, gate_named, gates_at
from data_builders.protocol import TOOL_CALL_OPEN

from .config import ServeGates
from .metrics import Metrics
from .protocol import APIError
from .upstream import Upstream


#: a gate's mode at a server: enforce (its decisions are acted on) or shadow (decided and recorded, never acted on)
GATE_MODES = ("enforce", "shadow")


def on_error_action(mode: str, gate: str) -> str:
    """What a failure of ``gate`` applies under ``gates.on_error=mode`` (each gate's own rule, its spec's
    ``on_error``): open lets the turn through as if no gate were there (the call runs, the answer stands, no response
    prefill); closed takes the gate's cautious action."""
    return gate_named(gate).on_error[ON_ERROR_MODES.index(mode)]


@dataclass
class GatePolicy:
    """How the gating layer resolves turns: the serve config's ``gates.*`` options (their defaults and help are
    written once, in ServeGates; the LiteLLM guardrail, which has no serve config, gets the same defaults here)."""
    on_error: str = ServeGates.on_error
    max_reasks: int = ServeGates.max_reasks
    max_continues: int = ServeGates.max_continues
    logprobs: bool = False          # request token log-probs from the upstream (the app: when G-STEP is loaded)
    concurrency: int = ServeGates.concurrency
    prefill_style: str = ServeGates.prefill_style
    modes: dict = field(default_factory=dict)     # gate -> enforce | shadow (absent: enforce)
    logprobs_auto: bool = True      # logprobs follows the loaded gates (gates.logprobs unset): a reload may turn it on

    def __post_init__(self):
        bad = {g: m for g, m in self.modes.items() if m not in GATE_MODES}
        if bad:
            raise ValueError(f"gates.modes: {bad}: each gate's mode is one of {GATE_MODES}")
        if self.on_error not in ON_ERROR_MODES:
            raise ValueError(f"gates.on_error={self.on_error!r}: choose open or closed")
        if self.max_reasks < 0 or self.max_continues < 0:
            raise ValueError("gates.max_reasks and gates.max_continues must be >= 0")
        if self.concurrency < 1:
            raise ValueError("gates.concurrency must be >= 1")


def skipped_call_message(call: dict) -> dict:
    return {"role": "tool", "tool_call_id": call["id"], "content": serialize(P.SKIPPED_CALL_RESULT)}


def forced_call(tool_choice: Any) -> str | None:
    """The call a ``tool_choice`` demands: a function's name, "" for any call ("required"), None when the model
    decides (auto / none / absent)."""
    if tool_choice == "required":
        return ""
    if isinstance(tool_choice, dict):
        return str((tool_choice.get("function") or {}).get("name", ""))
    return None


def check_forced_call(tool_choice: Any, choice: dict, local: bool = False) -> None:
    """A turn that ``tool_choice`` forced to a call must be that call: a client that named a function waits for
    its call, and a reply with no call (or another one) would end its agent with an empty output. Refused as a
    502, saying what the model did instead."""
    name = forced_call(tool_choice)
    if name is None:
        return
    calls = [c["function"]["name"] for c in choice["message"].get("tool_calls") or []]
    if calls and (not name or name in calls):
        return
    wanted = f"a call to {name!r}" if name else "a tool call"
    did = (f"called {calls}" if calls else "stopped at max_tokens before the call was complete"
           if choice.get("finish_reason") == "length" else "made no call")
    hint = (" (upstream.constrained_calls decodes a forced call under its grammar: install xgrammar, "
            ".[constrained])" if local and choice.get("finish_reason") != "length" else "")
    raise APIError(502, f"tool_choice demanded {wanted}, but the model {did}{hint}",
                   code="tool_choice_not_followed", param="tool_choice")


def token_logprobs(choice: dict) -> list[float] | None:
    content = (choice.get("logprobs") or {}).get("content")
    if not isinstance(content, list):
        return None
    values = [t.get("logprob") for t in content if isinstance(t, dict)]
    return [float(v) for v in values if isinstance(v, (int, float))] or None


class Gater:
    def __init__(self, gates: Any, upstream: Upstream, policy: GatePolicy, metrics: Metrics, capture: Any = None):
        self.gates, self.upstream, self.policy, self.metrics = gates, upstream, policy, metrics
        self.capture = capture      # capture.Capture: each completed request's record (None: off)
        # A decision is CPU-bound torch that already uses every core it is given: decisions run in worker threads
        # (the event loop keeps serving) but only `concurrency` at a time, as parallel ones only contend.
        self.limiter = CapacityLimiter(policy.concurrency)
        if getattr(upstream, "local", False):
            for gate in gates_at("pre_generation"):     # an unknown prefill style fails at start-up, not per request
                self.prefill_text(gate.name, gate.actions[1])

    def swap(self, gates: Any) -> None:
        """Serve ``gates`` from the next decision on (a reload): one attribute store, so a request in flight finishes
        on whichever gates it meets and none is refused; the old gates go when the last request holding them ends.
        A newly loaded gate that reads log-probs gets them requested (unless ``gates.logprobs`` was set false)."""
        if getattr(self.upstream, "local", False) and gates is not None:
            for gate in gates_at("pre_generation"):
                self.prefill_text(gate.name, gate.actions[1])
        if gates is not None and not self.policy.logprobs and self.policy.logprobs_auto:
            self.policy.logprobs = any(gate_named(g).reads_logprobs for m in MOMENTS for g in gates.at(m))
        self.gates = gates

    def prefill_text(self, gate: str, action: str) -> str:
        """The response prefill a pre_generation gate's applied ``action`` gives, in ``gates.prefill_style``."""
        return gate_named(gate).act(action, style=self.policy.prefill_style,
                                    call_format=self.upstream.call_format) or ""

    def _asks(self, moment: str) -> bool:
        """Whether any gate is asked at ``moment``: not on a plain proxy, nor where the gates hold none there (no
        thread hop for a None)."""
        return self.gates is not None and bool(self.gates.at(moment))

    def enforces(self, moment: str) -> bool:
        """Whether a gate at ``moment`` may change the turn (one in enforce mode): a stream holds such turns back
        until it has decided; a shadowed gate's turns stream as the ungated server streams them."""
        return self._asks(moment) and any(self.policy.modes.get(g, "enforce") == "enforce"
                                          for g in self.gates.at(moment))

    def _mode(self, moment: str, record: dict) -> dict:
        """``record`` as applied under its gate's mode: in shadow the gate's decision (or failure) is kept and
        counted, but the turn goes on as with no gate (``applied``: the moment's pass-through action)."""
        if self.policy.modes.get(record["gate"], "enforce") == "shadow":
            record.update(mode="shadow", applied=MOMENTS[moment]["passes"])
            self.metrics.shadow_decisions.labels(record["gate"], record["action"]).inc()
        return record

    def _gate_at(self, moment: str, error: Exception) -> str:
        """The gate a failure at ``moment`` is charged to: the one a GateError names, else the first there."""
        named = getattr(error, "gate", None)
        return named if isinstance(named, str) else self.gates.at(moment)[0]

    def _probes(self, context: list[dict], tools: list[dict]) -> bool:
        """Probe&Prefill on this upstream call: a conversation's first turn (no assistant message yet, so never a
        re-ask) that offers the policy tools (without any there is no tool decision to make), a probe loaded, and the
        policy in this process (no HTTP upstream returns hidden states)."""
        return (bool(tools) and getattr(self.upstream, "local", False) and self._asks("pre_generation")
                and not any(m.get("role") == "assistant" for m in context))

    def _failed(self, gate: str, error: Exception) -> dict:
        """The record of a gate that raised: resolved by the one on_error rule, never dropped."""
        return {"gate": gate, "action": "error", "error": f"{type(error).__name__}: {error}"[:300],
                "applied": on_error_action(self.policy.on_error, gate)}

    async def _decide(self, moment: str, ask: Callable[[], Any]) -> dict | None:
        """``ask()``'s decision at ``moment`` as a record, or None when the gates answer None. Gates run torch: a
        worker thread keeps the event loop serving other requests meanwhile. The gate-latency histogram includes the wait for a
        free worker; the decision's own ``latency_ms`` is featurizing + forward only."""
        start = time.perf_counter()
        try:
            decision = await to_thread.run_sync(ask, limiter=self.limiter)
        except Exception as e:  # a gate failure is recorded and resolved by on_error, never dropped
            gate = self._gate_at(moment, e)
            self.metrics.gate_errors.labels(gate).inc()
            self.metrics.gate_latency.labels(gate).observe(time.perf_counter() - start)
            return self._mode(moment, self._failed(gate, e))
        if decision is None:
            return None
        self.metrics.gate_latency.labels(decision.gate).observe(time.perf_counter() - start)
        record = asdict(decision)
        record["applied"] = record["action"]
        return self._mode(moment, record)

    async def tool_call(self, context: list[dict], tools: list[dict], call: dict) -> dict | None:
        """The pre_call gates (ToolGate) on a proposed ``call``: execute or skip (None: none loaded)."""
        if not self._asks("pre_call"):
            return None
        return await self._decide("pre_call", partial(self.gates.tool_call, context, tools, call))

    async def answer(self, context: list[dict], tools: list[dict], body: dict) -> dict | None:
        """The on_answer gates (G-STEP) on the final answer of ``body``'s first choice: commit or continue (None:
        none loaded). They read the completion's token log-probs, token counts and finish reason with the answer."""
        if not self._asks("on_answer"):
            return None
        choice = body["choices"][0]
        return await self._decide("on_answer", partial(self.gates.answer, context, tools, choice["message"]["content"],
                                                    token_logprobs(choice), usage=body.get("usage"),
                                                    finish_reason=choice.get("finish_reason")))

    def first_turn(self, records: list[dict], messages: list[dict], tools: list[dict], backend: Any
                   ) -> tuple[str, Any, str, bool]:
        """Probe&Prefill on a conversation's first turn, called by the in-process upstream with its ``backend`` in
        its own worker, between checking the messages and generating (one backend user at a time): the probe's
        decision (or its failure, resolved by on_error) goes to ``records``. Returns (the rendered prompt, the
        backend's prefill state, the response prefill) so the generation resumes from that state without a second
        forward pass over the prompt, as toolwise's loop does; a failed probe returns no prompt (the upstream
        renders it) and no state. The decision's ``latency_ms`` is the probe's own (the prompt's prefill is the
        generation's). The last value says whether the prefill belongs in the returned message: a soft prefill is a
        sentence that steers the policy, never part of its reply; a hard one is the forced opening of the policy's
        own call or boxed answer, so it stays part of that call or answer."""
        started = time.perf_counter()
        try:
            decision, prompt, state = self.gates.probe_first_prompt(backend, messages, tools)
        except Exception as e:  # noqa: BLE001 - recorded and resolved by on_error, never dropped
            record = {**self._failed(self._gate_at("pre_generation", e), e),
                      "latency_ms": round((time.perf_counter() - started) * 1000, 3)}
            prompt, state = "", None
        else:
            record = asdict(decision)
            record["applied"] = record["action"]
        record = self._mode("pre_generation", record)
        prefill = self.prefill_text(record["gate"], record["applied"])
        record["prefill"] = prefill     # the message never shows a soft one: the decision says what steered it
        records.append(record)
        return prompt, state, prefill, self.policy.prefill_style == "hard"

    async def complete(self, request: dict, messages: list[dict]) -> dict:
        tools = request.get("tools") or []
        # the probe makes the tool decision only where the client left it to the model (tool_choice auto)
        probe_tools = tools if request.get("tool_choice") in (None, "auto") else []
        payload = {k: v for k, v in request.items() if k != "messages"}
        if self.policy.logprobs:
            payload["logprobs"] = True      # G-STEP reads the answer's token log-probs
        injected: list[dict] = []
        decisions: list[dict] = []
        malformed_calls: list[dict] = []
        usage: Counter = Counter()
        continues = sum(m.get("role") == "user" and m.get("content") == P.VERIFY_PROMPT for m in messages)
        reasks, calls, upstream_s = 0, 0, 0.0
        turns: list[dict] = []      # every upstream turn as proposed, before a gate acted on it (capture)
        while True:
            context = messages + injected
            probed: list[dict] = []
            if self._probes(context, probe_tools):
                body, latency = await self.upstream.chat({**payload, "messages": context},
                                                         first_turn=partial(self.first_turn, probed, context, tools))
            else:
                body, latency = await self.upstream.chat({**payload, "messages": context})
            self.metrics.upstream_latency.observe(latency)
            calls += 1
            upstream_s += latency
            usage.update({k: v for k, v in (body.get("usage") or {}).items() if isinstance(v, int)})
            for rec in probed:      # counted once the turn it steered is back (a failed generation counts none)
                rec.update(round=calls - 1)
                decisions.append(rec)
                self.metrics.decisions.labels(rec["gate"], rec["applied"]).inc()
                self.metrics.gate_latency.labels(rec["gate"]).observe(rec["latency_ms"] / 1000)
                if rec["action"] == "error":
                    self.metrics.gate_errors.labels(rec["gate"]).inc()
            choice = body["choices"][0]
            turn = choice["message"]
            if self.capture is not None:
                turns.append({"round": calls - 1, "message": dict(turn), "logprobs": choice.get("logprobs"),
                              "finish_reason": choice.get("finish_reason"), "usage": body.get("usage")})
            noted = body.pop("toolwise", None)      # the local upstream's note: the markup it kept out of the reply
            malformed = noted.get("malformed_call") if isinstance(noted, dict) else None
            text = turn.get("content") or ""
            if malformed is None and not turn.get("tool_calls") and TOOL_CALL_OPEN in text:
                malformed = text[text.find(TOOL_CALL_OPEN):]     # an HTTP upstream's: its content is left as sent
            if malformed:       # opened a call nobody could parse: not a call, and no answer for G-STEP to judge
                self.metrics.malformed_calls.inc()
                malformed_calls.append({"round": calls - 1, "text": malformed})
            if turn.get("tool_calls"):
                records = []
                # a call the client's tool_choice forced is the client's decision, not the model's: not gated
                for call in turn["tool_calls"] if forced_call(request.get("tool_choice")) is None else []:
                    rec = await self.tool_call(context, tools, call)
                    if rec is not None:
                        rec.update(round=calls - 1, call_id=call["id"], call=call["function"]["name"])
                        records.append(rec)
                skipped = {r["call_id"] for r in records if r["applied"] == "skip"}
                if skipped and len(skipped) == len(turn["tool_calls"]) and reasks >= self.policy.max_reasks:
                    for r in records:   # every call skipped, no re-ask left: the client gets the turn as it is
                        r.update(applied="execute", reason="reask_limit")
                    skipped = set()
                decisions.extend(records)
                for r in records:
                    self.metrics.decisions.labels(r["gate"], r["applied"]).inc()
                self.metrics.skipped_calls.inc(len(skipped))
                if skipped and len(skipped) == len(turn["tool_calls"]):
                    reasks += 1
                    # the turn as a client would send it back (no vendor fields), then one result per call
                    asked = {"role": "assistant", "content": turn.get("content"), "tool_calls": turn["tool_calls"]}
                    injected += [asked, *(skipped_call_message(c) for c in turn["tool_calls"])]
                    continue
                if skipped:
                    turn["tool_calls"] = [c for c in turn["tool_calls"] if c["id"] not in skipped]
                break
            if not (turn.get("content") or "").strip() or malformed:
                break       # no answer text to judge
            # G-STEP judges the answer the client receives, boxed or plain; with it the completion's token counts
            # and finish reason, which it reads with the log-probs
            rec = await self.answer(context, tools, body)
            if rec is None:
                break
            rec.update(round=calls - 1)
            if rec["applied"] == "continue" and continues >= self.policy.max_continues:
                rec.update(applied="commit", reason="continue_limit")
            decisions.append(rec)
            self.metrics.decisions.labels(rec["gate"], rec["applied"]).inc()
            if rec["applied"] != "continue":
                break
            continues += 1
            self.metrics.continues.inc()
            injected += [{"role": "assistant", "content": turn["content"]},
                         {"role": "user", "content": P.VERIFY_PROMPT}]
        check_forced_call(request.get("tool_choice"), choice, local=getattr(self.upstream, "local", False))
        if self.policy.logprobs and not request.get("logprobs"):
            choice["logprobs"] = None       # asked for the gate, not by the client
        if usage:
            # what the request cost: every upstream call it made (re-asks and verification rounds included), not
            # the last one alone; the last call's per-call details would not add up, so they are not kept
            body["usage"] = {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
        body["toolwise"] = {"decisions": decisions, "injected": injected, "malformed_calls": malformed_calls,
                            "upstream_calls": calls,
                            "upstream_ms": round(upstream_s * 1000, 3), "usage": dict(usage)}
        if self.capture is not None:
            self.capture.record(request, body, turns)
        return body
