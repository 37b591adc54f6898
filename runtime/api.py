"""The runtime API: exported gates asked from any agent that speaks OpenAI chat messages.

    gates = Gates.load({"<gate>": "checkpoints/<gate>/<run>", ...},     # any gates of the registry, by name
                       policy=backend.fingerprint)
    d = gates.tool_call(messages, tools, response_message["tool_calls"][0])   # pre_call: execute | skip
    d = gates.answer(messages, tools, answer_text, logprobs)                  # on_answer: continue | commit

Each call converts the messages into the state toolwise's own loop would hold at that moment
(:mod:`data_builders.agent.openai_messages`) and asks the loaded gates that decide at that moment with the same code as the loop's
hooks (:func:`~runtime.controller_hooks.decide`): same featurizer, same threshold. On *skip* the agent answers the
call with :data:`SKIPPED_TOOL_MESSAGE` (the loop's fixed no-op result) and re-asks its model; on *continue* it
appends the answer and :data:`VERIFY_PROMPT` and re-asks. Needs torch and the featurizers; never Lightning or TRL."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import controllers
from controllers import Controller

from data_builders.agent import prompts as P
from data_builders.agent.hooks import PromptState
from data_builders.backends.chat import ChatText
from data_builders.environments.base import serialize
from data_builders.gates import MOMENTS, gate_named, gates
from data_builders.tasks.schema import Task
from .controller_hooks import GateDecision, checked, decide
from data_builders.agent.openai_messages import (TokenCounter, answer_episode, call_episode, call_format_of, check_tools,
                       first_prompt_messages)

__all__ = ["Gates", "GateDecision", "GateError", "SKIPPED_TOOL_MESSAGE", "VERIFY_PROMPT"]

#: the tool result a skipped call gets (the loop's, so the policy sees what it was trained/evaluated with)
SKIPPED_TOOL_MESSAGE = serialize(dict(P.SKIPPED_CALL_RESULT))
#: the user message a "continue" adds before re-asking
VERIFY_PROMPT = P.VERIFY_PROMPT


class _Tokenizer(ChatText):
    """The policy's tokenizer alone (no model): renders and counts exactly as its backend does."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer


def _counter(tokenizer: str | Path | TokenCounter | None, policy: str | None) -> TokenCounter | None:
    """``tokenizer`` as a counter. ``"auto"``: the policy's own tokenizer when it is on this machine (the embedded
    model's, or a cached hub id / local path named by the fingerprint), else None."""
    if tokenizer is None or (hasattr(tokenizer, "render") and hasattr(tokenizer, "count_tokens")):
        return tokenizer
    if hasattr(tokenizer, "apply_chat_template"):
        return _Tokenizer(tokenizer)
    # why here: transformers (and the embedded model's files) are needed only when a tokenizer is loaded
    from transformers import AutoTokenizer

    from data_builders.backends.loading import EMBEDDED_ALIASES, embedded_model_dir
    if tokenizer == "auto":
        model_id = (policy or "").split("@")[0]
        if not model_id:
            return None
        try:
            source = embedded_model_dir() if model_id in EMBEDDED_ALIASES else model_id
            return _Tokenizer(AutoTokenizer.from_pretrained(str(source), local_files_only=True))
        except (OSError, ValueError):     # not on this machine: counts must come with the messages
            return None
    source = embedded_model_dir() if tokenizer in EMBEDDED_ALIASES else tokenizer
    return _Tokenizer(AutoTokenizer.from_pretrained(str(source)))


class GateError(RuntimeError):
    """A gate that raised while deciding: ``gate`` names it (a server resolves it by that gate's on_error rule)."""

    def __init__(self, gate: str, error: Exception):
        super().__init__(f"{type(error).__name__}: {error}")
        self.gate, self.error = gate, error


@dataclass
class Gates:
    """Loaded gates (any subset of the registry, ``data_builders.gates``, keyed by name) and what a conversion
    needs: the policy's call format and, optionally, its tokenizer for token counts the messages do not carry (see
    :mod:`data_builders.agent.openai_messages`). ``gates.<name>`` is that gate's controller, or None when it is not loaded."""

    controllers: dict[str, Controller] = field(default_factory=dict)
    policy: str | None = None
    strict: bool = True
    call_format: str = "xml"
    counter: TokenCounter | None = None
    taus: dict[str, float] = field(default_factory=dict)   # per-gate τ override; default the calibrated τ
    options: dict[str, dict] = field(default_factory=dict)  # per-gate hook options (the probe's style)
    support_z: dict[str, float | None] = field(default_factory=dict)   # per-gate support limit (decide)

    def __getattr__(self, name: str):
        # only for names that are not attributes: a registered gate's controller, None when not loaded
        if name.startswith("_") or "controllers" not in self.__dict__:
            raise AttributeError(name)
        if name in self.__dict__["controllers"]:
            return self.__dict__["controllers"][name]
        gate_named(name)      # an unknown name is refused with the registry's names
        return None

    @classmethod
    def load(cls, paths: dict[str, str | None] | None = None, *, policy: str | None = None, strict: bool = True,
             tokenizer: str | TokenCounter | None = "auto", call_format: str = "auto",
             taus: dict[str, float] | None = None, options: dict[str, dict] | None = None,
             support_z: dict[str, float | None] | None = None, **named: str | None) -> "Gates":
        """Exported checkpoint dirs (or hub ids) by gate name: ``paths`` and/or keywords
        (``Gates.load(toolgate=..., g_step=...)``); a None path leaves that gate out. Each controller's contract is
        checked against its gate's featurizer and, when ``policy`` (a backend fingerprint) is given and ``strict``,
        against the policy it was trained on, as the hooks do. ``call_format``: how the policy writes calls
        (``auto``: the loop's rule on the policy, else on the first gate's contract). ``tokenizer``: the policy's
        tokenizer, for token counts the messages lack (gates that read them): a path / hub id, a tokenizer, a
        toolwise backend, None, or ``auto`` (default: the policy's, found from the fingerprint when it is on this
        machine). ``taus``: gate name -> τ (default: calibrated). ``options``: gate name -> its hook's options.
        ``support_z``: gate name -> its support limit (:func:`~runtime.controller_hooks.decide`; default the gate's
        own, ``Gate.support_z``: G-STEP 8, the others none; None: always decide)."""
        paths = {**(paths or {}), **named}
        for where, names in (("checkpoints", paths), ("taus", taus or {}), ("options", options or {}),
                             ("support_z", support_z or {})):
            unknown = sorted(set(names) - set(gates()))
            if unknown:
                raise ValueError(f"{where}: unknown gate(s) {unknown}; gates: {sorted(gates())}")
        loaded = {name: checked(controllers.load(path), name, policy, strict=strict)
                  for name, path in paths.items() if path is not None}
        trained_on = policy or next((c.contract.get("backend") for c in loaded.values()), None)
        if call_format == "auto":
            call_format = call_format_of(trained_on)
        elif call_format not in P.CALL_FORMATS:
            raise ValueError(f"call_format: choose auto or one of {P.CALL_FORMATS}, got {call_format!r}")
        counts = any(gate_named(name).reads_token_counts for name in loaded)
        counter = _counter(tokenizer, trained_on if counts else None)
        opts = {name: {**gate_named(name).options, **(options or {}).get(name, {})} for name in loaded}
        for name, o in opts.items():     # an unknown option value (a prefill style) fails here, not per request
            gate = gate_named(name)
            gate.act(gate.actions[1], **{**o, "call_format": call_format})
        limits = {name: (support_z or {}).get(name, gate_named(name).support_z) for name in loaded}
        return cls(loaded, policy=policy, strict=strict, call_format=call_format, counter=counter,
                   taus=dict(taus or {}), options=opts, support_z=limits)

    def at(self, moment: str) -> list[str]:
        """The loaded gates that decide at ``moment``, in registry order."""
        return [name for name in self.controllers if gate_named(name).moment == moment]

    def warmup(self) -> "Gates":
        """Load what the first decisions would load lazily (ToolGate's MiniLM encoder: ~4-5 s here), so a server's
        first request does not pay for it."""
        for name in self.controllers:
            if gate_named(name).warmup is not None:
                gate_named(name).warmup()
        return self

    def respond(self, decision: GateDecision):
        """What the loop's hook does with ``decision`` (the probe's: its response prefill)."""
        gate = gate_named(decision.gate)
        return gate.act(decision.action, **{**self.options.get(decision.gate, {}), "call_format": self.call_format})

    def _decide(self, moment: str, *state) -> GateDecision | None:
        """The decision at ``moment``: every loaded gate there is asked in registry order, and the first that
        does not let the turn pass (skip a call, continue, ...) decides, else the last asked; a gate that raises
        is a :class:`GateError` naming it."""
        decision = None
        for name in self.at(moment):
            try:
                decision = decide(name, self.controllers[name], *state, tau=self.taus.get(name),
                                  support_z=self.support_z.get(name))
            except Exception as e:
                raise GateError(name, e) from e
            if decision.action != MOMENTS[moment]["passes"]:
                return decision
        return decision

    def tool_call(self, messages: list[dict], tools: list[dict], call: dict, *, task: Task | dict | None = None,
                  mode: str | None = None) -> GateDecision | None:
        """Should the proposed ``call`` run (the gates at ``pre_call``)? ``call``: the OpenAI tool call (or the
        assistant message proposing it); ``messages``: the conversation before that message. None when no gate
        decides there."""
        if not self.at("pre_call"):
            return None
        view, parsed = call_episode(messages, tools, call, task=task, mode=mode, call_format=self.call_format,
                                    counter=self.counter)
        return self._decide("pre_call", view, parsed)

    def answer(self, messages: list[dict], tools: list[dict], answer: str, logprobs: list[float] | None,
               *, usage: dict | None = None, finish_reason: str | None = None, task: Task | dict | None = None,
               mode: str | None = None) -> GateDecision | None:
        """Commit the final ``answer`` (its text: with ``\\boxed{...}`` as toolwise's loop answers, or plain, as the
        client receives it) or continue with one verification round (the gates at ``on_answer``)?
        ``logprobs``, ``usage``, ``finish_reason``: of the completion that wrote it (G-STEP reads token counts
        and log-probs; earlier assistant messages may carry theirs, see the messages module). None when no
        gate decides there."""
        if not self.at("on_answer"):
            return None
        view, text = answer_episode(messages, tools, answer, logprobs, usage=usage, finish_reason=finish_reason,
                                    task=task, mode=mode, call_format=self.call_format, counter=self.counter)
        return self._decide("on_answer", view, text)

    def first_turn(self, backend, messages: list[dict], tools: list[dict] | None) -> GateDecision | None:
        """The gate at ``pre_generation`` (Probe&Prefill) before the first generation: it reads the policy's hidden
        states of the rendered first prompt (a toolwise HF/vLLM backend: ``backend.prefill``). Its ``action``
        picks the response prefill (:meth:`respond`). None when no gate decides there."""
        probed = self.probe_first_prompt(backend, messages, tools)
        return None if probed is None else probed[0]

    def probe_first_prompt(self, backend, messages: list[dict], tools: list[dict] | None
                           ) -> tuple[GateDecision, str, Any] | None:
        """:meth:`first_turn`'s decision with the rendered prompt and the backend's prefill state, so the caller
        generates from that state (``backend.generate(..., prefill_state=state)``) without a second forward pass
        over the prompt, as toolwise's loop does. None when no gate decides there."""
        names = self.at("pre_generation")
        if not names:
            return None
        name = names[0]           # one gate reads the first prompt's states (a cascade takes one)
        gate, controller = gate_named(name), self.controllers[name]
        if self.strict:     # the gate reads this backend's states: they must be the ones it was trained on
            checked(controller, name, backend.fingerprint)
        loop_messages = first_prompt_messages(messages, call_format=self.call_format)
        prompt = backend.render(P.template_messages(loop_messages), check_tools(tools))
        layers: Sequence[int] = gate.hidden_layers(controller)
        state = backend.prefill([prompt], layers)
        try:
            decision = decide(gate, controller, PromptState(prompt, loop_messages, state.hidden[0], state.layers),
                              tau=self.taus.get(name), support_z=self.support_z.get(name))
        except Exception as e:
            raise GateError(name, e) from e
        return decision, prompt, state
