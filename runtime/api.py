"""The runtime API: exported gates asked from any agent that speaks OpenAI chat messages.

    gates = Gates.load(toolgate="checkpoints/toolgate/<run>", g_step="checkpoints/g_step/<run>",
                       policy=backend.fingerprint)
    d = gates.tool_call(messages, tools, response_message["tool_calls"][0])   # execute | skip
    d = gates.answer(messages, tools, answer_text, logprobs)                  # continue | commit

Each call converts the messages into the state toolwise's own loop would hold at that moment
(:mod:`runtime.messages`) and decides with the same code as the loop's hooks
(:func:`~runtime.controller_hooks.toolgate_decision` and its siblings): same featurizer, same
threshold. On *skip* the agent answers the call with :data:`SKIPPED_TOOL_MESSAGE` (the loop's fixed no-op
result) and re-asks its model; on *continue* it appends the answer and :data:`VERIFY_PROMPT` and re-asks.
Needs torch and the featurizers; never Lightning or TRL.
"""
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
from data_builders.features.toolgate import embed_texts
from data_builders.tasks.schema import Task
from .controller_hooks import (GateDecision, checked, gstep_decision, probe_decision, prefill_text,
                               toolgate_decision)
from .messages import (TokenCounter, answer_episode, call_format_of, check_tools, first_prompt_messages,
                       toolgate_episode)

__all__ = ["Gates", "GateDecision", "SKIPPED_TOOL_MESSAGE", "VERIFY_PROMPT", "prefill_text"]

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


@dataclass
class Gates:
    """Loaded gates (any subset) and what a conversion needs: the policy's call format and, optionally, its
    tokenizer for token counts the messages do not carry (see :mod:`runtime.messages`)."""

    toolgate: Controller | None = None
    g_step: Controller | None = None
    probe_prefill: Controller | None = None
    policy: str | None = None
    strict: bool = True
    call_format: str = "xml"
    counter: TokenCounter | None = None
    taus: dict[str, float] = field(default_factory=dict)   # per-gate τ override; default the calibrated τ

    @classmethod
    def load(cls, *, toolgate: str | None = None, g_step: str | None = None, probe_prefill: str | None = None,
             policy: str | None = None, strict: bool = True, tokenizer: str | TokenCounter | None = "auto",
             call_format: str = "auto", taus: dict[str, float] | None = None) -> "Gates":
        """Exported checkpoint dirs (or hub ids). Each controller's contract is checked against its featurizer
        and, when ``policy`` (a backend fingerprint) is given and ``strict``, against the policy it was trained
        on, as the hooks do. ``call_format``: how the policy writes calls (``auto``: the loop's rule on the
        policy, else on the first gate's contract). ``tokenizer``: the policy's tokenizer, for token counts the
        messages lack (G-STEP): a path / hub id, a tokenizer, a toolwise backend, None, or ``auto`` (default: the
        policy's, found from the fingerprint when it is on this machine). ``taus``: gate name -> τ (default:
        calibrated)."""
        paths = {"toolgate": toolgate, "g_step": g_step, "probe_prefill": probe_prefill}
        unknown = set(taus or {}) - set(paths)
        if unknown:
            raise ValueError(f"taus: unknown gate(s) {sorted(unknown)}; gates: {sorted(paths)}")
        loaded = {name: checked(controllers.load(path), name, policy, strict=strict)
                  for name, path in paths.items() if path is not None}
        trained_on = policy or next((c.contract.get("backend") for c in loaded.values()), None)
        if call_format == "auto":
            call_format = call_format_of(trained_on)
        elif call_format not in P.CALL_FORMATS:
            raise ValueError(f"call_format: choose auto or one of {P.CALL_FORMATS}, got {call_format!r}")
        counter = _counter(tokenizer, trained_on if g_step else None)    # only G-STEP reads token counts
        return cls(**loaded, policy=policy, strict=strict, call_format=call_format, counter=counter,
                   taus=dict(taus or {}))

    def warmup(self) -> "Gates":
        """Load what the first decision would load lazily (ToolGate's MiniLM encoder: ~4-5 s here), so a server's
        first request does not pay for it."""
        if self.toolgate is not None:
            embed_texts(["warm-up"])
        return self

    def tool_call(self, messages: list[dict], tools: list[dict], call: dict, *, task: Task | dict | None = None,
                  mode: str | None = None) -> GateDecision | None:
        """Should the proposed ``call`` run? ``call``: the OpenAI tool call (or the assistant message proposing
        it); ``messages``: the conversation before that message. None when no ToolGate is loaded."""
        if self.toolgate is None:
            return None
        view, parsed = toolgate_episode(messages, tools, call, task=task, mode=mode, call_format=self.call_format,
                                        counter=self.counter)
        return toolgate_decision(self.toolgate, view, parsed, self.taus.get("toolgate"))

    def answer(self, messages: list[dict], tools: list[dict], answer: str, logprobs: list[float] | None,
               *, usage: dict | None = None, finish_reason: str | None = None, task: Task | dict | None = None,
               mode: str | None = None) -> GateDecision | None:
        """Commit the final ``answer`` (its text: with ``\\boxed{...}`` as toolwise's loop answers, or plain, as the
        client receives it) or continue with one verification round?
        ``logprobs``, ``usage``, ``finish_reason``: of the completion that wrote it (G-STEP reads token counts
        and log-probs; earlier assistant messages may carry theirs, see the messages module). None when no
        G-STEP gate is loaded."""
        if self.g_step is None:
            return None
        view, text = answer_episode(messages, tools, answer, logprobs, usage=usage, finish_reason=finish_reason,
                                    task=task, mode=mode, call_format=self.call_format, counter=self.counter)
        return gstep_decision(self.g_step, view, text, self.taus.get("g_step"))

    def first_turn(self, backend, messages: list[dict], tools: list[dict] | None) -> GateDecision | None:
        """Probe&Prefill before the first generation: the policy's hidden states of the rendered first prompt
        (a toolwise HF/vLLM backend: ``backend.prefill``). ``action`` "use"/"skip" picks the response prefill
        (:func:`prefill_text`). None when no probe is loaded."""
        probed = self.probe_first_prompt(backend, messages, tools)
        return None if probed is None else probed[0]

    def probe_first_prompt(self, backend, messages: list[dict], tools: list[dict] | None
                           ) -> tuple[GateDecision, str, Any] | None:
        """:meth:`first_turn`'s decision with the rendered prompt and the backend's prefill state, so the caller
        generates from that state (``backend.generate(..., prefill_state=state)``) without a second forward pass
        over the prompt, as toolwise's loop does. None when no probe is loaded."""
        if self.probe_prefill is None:
            return None
        if self.strict:     # the probe reads this backend's states: they must be the ones it was trained on
            checked(self.probe_prefill, "probe_prefill", backend.fingerprint)
        loop_messages = first_prompt_messages(messages, call_format=self.call_format)
        prompt = backend.render(P.template_messages(loop_messages), check_tools(tools))
        layers: Sequence[int] = list(range(self.probe_prefill.contract["input_shape"][0]))
        state = backend.prefill([prompt], layers)
        decision = probe_decision(self.probe_prefill, PromptState(prompt, loop_messages, state.hidden[0],
                                                                   state.layers), self.taus.get("probe_prefill"))
        return decision, prompt, state
