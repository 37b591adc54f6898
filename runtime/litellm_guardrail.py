"""toolwise's gates as a LiteLLM proxy guardrail, for agents that already go through a LiteLLM proxy
(``pip install -e ".[litellm]"``; docs/guide.md, "LiteLLM guardrail")::

    guardrails:
      - guardrail_name: toolwise
        litellm_params:
          guardrail: runtime.litellm_guardrail.ToolwiseGuardrail
          mode: post_call
          default_on: true
          toolgate: checkpoints/toolgate/<run>     # either or both; the gates' own options below
          g_step: checkpoints/g_step/<run>

A post-call guardrail: once the model's turn is back, ToolGate decides on each proposed ``tool_calls`` entry and
G-STEP on an answer, exactly as the gated endpoint does (the same :class:`~runtime.serve.gating.Gater`: a skip
re-asks the model with the skipped-call tool message, a *continue* adds one verification round, with the same
limits and ``on_error`` rule). Re-asks go through the proxy's own router (``llm_router.acompletion``: the same
deployment, retries and fallbacks as the client's call). The response carries ``toolwise`` (decisions, injected
messages, usage of the extra calls) and each decision is logged on the proxy's logger (``LITELLM_LOG=INFO``).

Streamed requests are not gated: LiteLLM runs post-call guardrails on whole responses (use the gated endpoint,
``python -m runtime.serve``, in front of LiteLLM or of the model to gate a stream)."""
from __future__ import annotations

import copy
import importlib
import time
from typing import Any

from litellm._logging import verbose_proxy_logger
from litellm.integrations.custom_guardrail import CustomGuardrail
from litellm.types.guardrails import GuardrailEventHooks
from litellm.types.utils import ModelResponse
from openai.types.chat.completion_create_params import CompletionCreateParamsBase

from data_builders.gates import gates as registered
from runtime.serve.gating import Gater, GatePolicy
from runtime.serve.metrics import Metrics

#: what of LiteLLM's request data is the OpenAI request (the rest is the proxy's metadata): what a re-ask resends
OPENAI_PARAMS = frozenset(CompletionCreateParamsBase.__annotations__) - {"stream", "stream_options"}


def load_factory(path: str) -> Any:
    """``module:attribute`` (``runtime.api:Gates.load``) -> the callable."""
    module, _, attr = path.partition(":")
    target: Any = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)
    return target


class _Proxied:
    """The upstream the gating layer sees inside the proxy: the first turn is the response LiteLLM already has,
    every re-ask a call through the proxy's router."""

    local = False

    def __init__(self, first: dict, model: str):
        self.first, self.base_url = first, f"litellm:{model}"

    async def chat(self, payload: dict, **_: Any) -> tuple[dict, float]:
        if self.first is not None:
            body, self.first = self.first, None
            return body, 0.0
        start = time.perf_counter()
        from litellm.proxy.proxy_server import llm_router     # the proxy's router, set once its config is loaded

        if llm_router is not None:
            response = await llm_router.acompletion(**payload)
        else:       # the guardrail used from the SDK, without a proxy
            import litellm

            response = await litellm.acompletion(**payload)
        return response.model_dump(), time.perf_counter() - start


class ToolwiseGuardrail(CustomGuardrail):
    """``<gate>: <checkpoint>`` for each gate it applies (``toolgate``, ``g_step``, or any other gate of the registry
    at ``pre_call`` / ``on_answer``: exported checkpoint dirs or hub ids), loaded by :meth:`runtime.api.Gates.load`
    with ``policy`` / ``strict`` / ``taus``; ``on_error``, ``max_reasks``, ``max_continues``: as the gated
    endpoint's ``gates.*``. ``gates_factory`` (``module:callable``) with ``gates_kwargs`` builds another gates object
    instead (anything with ``at`` / ``tool_call`` / ``answer``, e.g. the tests' ``runtime.serve.testing:ForcedGates``)."""

    def __init__(self, policy: str | None = None, strict: bool = True, on_error: str = GatePolicy.on_error,
                 max_reasks: int = GatePolicy.max_reasks, max_continues: int = GatePolicy.max_continues,
                 concurrency: int = GatePolicy.concurrency, taus: dict | None = None,
                 gates_factory: str | None = None, gates_kwargs: dict | None = None, **kwargs: Any):
        paths = {name: kwargs.pop(name) for name in list(kwargs) if name in registered()}
        kwargs.setdefault("event_hook", GuardrailEventHooks.post_call)
        super().__init__(supported_event_hooks=[GuardrailEventHooks.post_call], **kwargs)
        reads_states = [name for name, path in paths.items()
                        if path is not None and registered()[name].moment == "pre_generation"]
        if reads_states:
            raise ValueError(f"the toolwise guardrail cannot apply {reads_states}: a gate before generation reads "
                             "the policy's hidden states, which a proxied model does not return (serve it with "
                             "python -m runtime.serve upstream=local)")
        if gates_factory is not None:
            gates = load_factory(gates_factory)(**(gates_kwargs or {}))
        elif all(path is None for path in paths.values()):
            names = [n for n, g in registered().items() if g.moment != "pre_generation"]
            raise ValueError(f"the toolwise guardrail needs one or more of {names} (exported checkpoint dirs), or "
                             "gates_factory")
        else:
            from runtime.api import Gates     # torch, the controllers and MiniLM: loaded once, at proxy start-up

            gates = Gates.load(paths, policy=policy, strict=strict, taus=taus).warmup()
        self.gates = gates
        self.policy = GatePolicy(on_error=on_error, max_reasks=max_reasks, max_continues=max_continues,
                                 concurrency=concurrency)
        self.metrics = Metrics()
        self.gater = Gater(gates, _Proxied({}, ""), self.policy, self.metrics)    # its limiter is shared

    async def async_post_call_success_hook(self, data: dict, user_api_key_dict: Any, response: Any) -> Any:
        if not isinstance(response, ModelResponse) or not response.choices:
            return None         # embeddings, images, ...: nothing to gate
        request = {k: v for k, v in data.items() if k in OPENAI_PARAMS}
        if not isinstance(request.get("messages"), list):
            return None
        gater = copy.copy(self.gater)       # the same gates, limiter and metrics, over this request's upstream
        gater.upstream = _Proxied(response.model_dump(), str(request["model"]))
        body = await gater.complete(request, request["messages"])
        call_id = data.get("litellm_call_id")
        for d in body["toolwise"]["decisions"]:
            verbose_proxy_logger.info("toolwise %s call=%s round=%s action=%s applied=%s p=%.3f tau=%.3f%s", d["gate"], call_id,
                     d.get("round"), d["action"], d["applied"], d.get("probability", float("nan")),
                     d.get("tau", float("nan")), f" error={d['error']}" if d.get("error") else "")
        if body["toolwise"]["upstream_calls"] == 1:
            # no re-ask: the model's own response goes on (LiteLLM's ids, cost and hidden params kept)
            response.toolwise = body["toolwise"]
            return response
        out = ModelResponse(**{k: v for k, v in body.items() if k != "toolwise"})
        out.toolwise = body["toolwise"]
        return out
