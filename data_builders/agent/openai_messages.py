"""OpenAI chat messages → the episode state toolwise's featurizers see inside its own agent loop.

One converter (:func:`episode_from_openai`) for every gate: a user's agent sends the conversation the way an
OpenAI-compatible server takes it (``system`` / ``user`` / ``assistant`` messages, assistant ``tool_calls``
``[{id, type: "function", function: {name, arguments: <JSON string>}}]``, ``tool`` messages with
``tool_call_id``) plus the ``tools`` list, and gets back the :class:`~data_builders.agent.hooks.EpisodeView`
the loop (``data_builders/agent/loop.py``) would hold at the same moment:

* ``messages`` in the loop's own form: an assistant turn is its raw text (content + the call written the
  way the policy writes calls, ``xml`` or ``native``), a tool result is the loop's tool-response message;
* ``calls`` as typed :class:`~data_builders.agent.trajectory.Call` s (executed / skipped / noop / rejected,
  told apart by toolwise's fixed payloads and rejection messages, as the loop writes them);
* ``turns``, one per assistant message, with the token counts and log-probs of the generation that wrote it;
* ``task`` (the instruction is the first user message, less toolwise's response-policy suffix when present),
  ``mode`` and ``round``.

The loop calls ``pre_call`` *before* the proposing assistant message is appended (the view's messages end
before it, its turn is already in ``turns``) and ``on_answer`` likewise before the answer message; the
converter reproduces both.

Generation metadata. G-STEP reads each turn's token counts and log-probs, which plain chat messages do not
carry. An assistant message may carry the fields of the completion it came from (what an OpenAI-compatible
server returns beside the message): ``usage`` (``prompt_tokens``, ``completion_tokens``), ``logprobs``
(the choice's ``{"content": [{"logprob": ...}, ...]}`` or a plain list of floats), ``finish_reason``, and
``prefill`` (a response prefill the Probe&Prefill gate put before the generation). A missing count is
computed with the policy's tokenizer when one is given (``counter``: a toolwise backend, or anything with
its ``render`` / ``count_tokens``); the prompt count is then exact, a completion count read from the text
can miss an end-of-sequence token. With neither, a G-STEP state is refused naming the message and field;
ToolGate reads no token count, so its state leaves unknown counts at 0.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from data_builders.agent import prompts as P
from data_builders.agent.hooks import EpisodeView
from data_builders.agent.parsing import ToolCall, has_boxed, parse_tool_call
from data_builders.agent.trajectory import Call, Turn, error_kind
from data_builders.environments.base import serialize
from data_builders.tasks.schema import EnvSpec, Task

ROLES = ("system", "developer", "user", "assistant", "tool")   # developer: OpenAI's newer name for system
#: the loop's answers to a call it does not run (a user message instead of a tool result) -> Call.reason
_REJECTIONS = {P.MISSING_REASONING_CALL: P.MISSING_REASONING_CALL, P.NO_REASONING_CALL: P.NO_REASONING_CALL,
               P.TOOL_BUDGET_USED: "max_tool_calls"}


class TokenCounter(Protocol):
    """What the converter needs of the policy's tokenizer (every toolwise backend has both)."""

    def render(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> str: ...

    def count_tokens(self, text: str) -> int: ...


@dataclass
class Converted:
    """The converted episode: the view a hook gets, plus what the converter inferred."""

    view: EpisodeView
    reasoning: bool        # the prompt asks for reason-then-act (toolwise's user prompt only)
    call_format: str


def call_format_of(policy: str | None) -> str:
    """The loop's ``call_format="auto"`` for the model of a policy fingerprint (``model_id@config``)."""
    return P.auto_call_format((policy or "").split("@")[0])


def _name(i: int | str) -> str:
    """How an error names a message: its index in the caller's list, or the gate argument it came from."""
    return f"messages[{i}]" if isinstance(i, int) else i


def _where(i: int | str, field: str) -> str:
    return f"{_name(i)}.{field}"


def _text(content: Any, where: str) -> str:
    """Message content as text: a string, None (empty), or OpenAI's list of ``{"type": "text"}`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise ValueError(f"{where}[{k}]: only text parts ({{'type': 'text', 'text': ...}}) are supported, "
                                 f"got {part!r:.80}")
            parts.append(part["text"])
        return "".join(parts)
    raise ValueError(f"{where}: expected a string, null or a list of text parts, got {type(content).__name__}")


def parse_call(call: Any, where: str) -> tuple[str | None, ToolCall]:
    """``(id, ToolCall)`` from an OpenAI tool call ``{id, type, function: {name, arguments}}`` (``arguments`` a
    JSON object, as a string or already decoded)."""
    if not isinstance(call, dict):
        raise ValueError(f"{where}: expected a tool call object, got {type(call).__name__}")
    if call.get("type", "function") != "function":
        raise ValueError(f"{where}.type: only 'function' tool calls exist, got {call.get('type')!r}")
    fn = call.get("function")
    if not isinstance(fn, dict):
        raise ValueError(f"{where}.function: missing or not an object")
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.function.name: expected a non-empty string, got {name!r}")
    args = fn.get("arguments", "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}.function.arguments: not valid JSON ({e})") from None
    if not isinstance(args, dict):
        raise ValueError(f"{where}.function.arguments: expected a JSON object, got {type(args).__name__}")
    call_id = call.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise ValueError(f"{where}.id: expected a string, got {type(call_id).__name__}")
    return call_id, ToolCall(name=name, arguments=args)


def _same(written: ToolCall | None, call: ToolCall) -> bool:
    return written is not None and (written.name, written.arguments) == (call.name, call.arguments)


def assistant_text(content: str, call: ToolCall | list[ToolCall] | None, call_format: str) -> str:
    """The raw assistant text the loop holds: the content, and the call as the policy writes it unless the
    content already holds that very call (an agent that keeps the model's raw text). Where the loop would not
    read text before a call as that call (native format: a call turn is the JSON alone), the call alone.
    Several calls in one turn (an agent with parallel calls; toolwise's loop makes one per turn): each written
    out, one after the other."""
    if isinstance(call, list):
        texts = [P.tool_call_text(c.name, c.arguments, call_format) for c in call]
        return "\n".join(([content] if content.strip() else []) + texts)
    if call is None or _same(parse_tool_call(content), call):
        return content
    text = P.tool_call_text(call.name, call.arguments, call_format)
    joined = f"{content}\n{text}" if content.strip() else text
    return joined if _same(parse_tool_call(joined), call) else text


def _logprobs(value: Any, where: str) -> list[float] | None:
    if value is None:
        return None
    if isinstance(value, dict):
        value = value.get("content")
        if not isinstance(value, list):
            raise ValueError(f"{where}.content: expected the list of token log-probs")
        value = [x.get("logprob") if isinstance(x, dict) else x for x in value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{where}: expected a list of floats or {{'content': [{{'logprob': ...}}]}}")
    out = []
    for k, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise ValueError(f"{where}[{k}]: expected a number, got {x!r:.40}")
        out.append(round(float(x), 4))     # the loop stores log-probs at 4 decimals
    return out


def _count(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: expected an integer >= 0, got {value!r}")
    return value


def _usage(msg: dict, where: str) -> tuple[int | None, int | None]:
    usage = msg.get("usage")
    if usage is None:
        return None, None
    if not isinstance(usage, dict):
        raise ValueError(f"{where}.usage: expected an object with prompt_tokens / completion_tokens")
    return (_count(usage.get("prompt_tokens"), f"{where}.usage.prompt_tokens"),
            _count(usage.get("completion_tokens"), f"{where}.usage.completion_tokens"))


def _payload(content: str) -> dict:
    """A tool message's content as the payload the loop records: a JSON object as is, anything else (a tool
    that answers in plain text or a bare value) as ``{"result": ...}``."""
    try:
        value = json.loads(content)
    except (json.JSONDecodeError, ValueError):
        return {"result": content}
    return value if isinstance(value, dict) else {"result": value}


def split_user_prompt(content: str) -> tuple[str, str | None, bool]:
    """``(instruction, mode, reasoning)`` of a first user message written by ``prompts.user_prompt``; any other
    text is the instruction itself (mode None). no_tool and hard_no_tool share one text: it reads as no_tool."""
    for mode in P.ALL_MODES:
        for reasoning in (False, True):
            suffix = P.user_prompt("", mode, reasoning)
            if content.endswith(suffix) and len(content) > len(suffix):
                return content[: -len(suffix)], mode, reasoning
    return content, None, False


def _task(task: Task | dict | None, instruction: str, tools: list[dict]) -> Task:
    if isinstance(task, Task):
        return task
    meta = dict(task or {})
    unknown = set(meta) - {"id", "instruction", "difficulty", "category", "multi_step", "env"}
    if unknown:
        raise ValueError(f"task: unknown field(s) {sorted(unknown)}; known: id, instruction, difficulty, category, "
                         "multi_step, env")
    names = tuple(t["function"]["name"] for t in tools)
    return Task(id=meta.get("id", "openai"), instruction=meta.get("instruction", instruction),
                environments=(EnvSpec(name=meta.get("env", "openai"), tools=names),), expected={},
                difficulty=meta.get("difficulty", ""), multi_step=bool(meta.get("multi_step", False)),
                category=meta.get("category", "other"))


def check_tools(tools: Any) -> list[dict]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ValueError(f"tools: expected a list of tool specs, got {type(tools).__name__}")
    for k, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ValueError(f"tools[{k}]: expected {{'type': 'function', 'function': {{'name': ..., ...}}}}")
    return tools


def episode_from_openai(messages: Any, tools: Any = None, *, task: Task | dict | None = None,
                        mode: str | None = None, call_format: str = "xml", counter: TokenCounter | None = None,
                        need_tokens: bool = False, last_name: str | None = None,
                        last_pending: bool = False) -> Converted:
    """The loop's view after the given messages (all of them: nothing pending). ``task``: the task's metadata
    (a :class:`Task`, or a dict of ``instruction`` / ``difficulty`` / ``category`` / ``multi_step``) that
    G-STEP reads; ``mode``: the prompt mode (default: read from toolwise's user prompt, else ``default``).
    ``need_tokens``: refuse a turn whose token counts are neither given nor countable. ``last_name``: how errors
    name the last message (the gate's own argument, e.g. ``answer``, rather than an index the caller never sent).
    ``last_pending``: the last message proposes the call being asked about (it has no result yet)."""
    if call_format not in P.CALL_FORMATS:
        raise ValueError(f"call_format: choose one of {P.CALL_FORMATS}, got {call_format!r}")
    tools = check_tools(tools)
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages: expected a non-empty list of chat messages")
    out: list[dict] = []
    turns: list[Turn] = []
    calls: list[Call] = []
    pending: dict[str, Call] = {}       # tool_call_id ("" when none) -> the call awaiting its result
    first_user: str | None = None
    for i, msg in enumerate(messages):
        w = last_name if last_name and i == len(messages) - 1 else i     # how errors name this message
        if not isinstance(msg, dict):
            raise ValueError(f"{_name(w)}: expected an object, got {type(msg).__name__}")
        role = msg.get("role")
        if role not in ROLES:
            raise ValueError(f"{_where(w, 'role')}: expected one of {ROLES}, got {role!r}")
        content = _text(msg.get("content"), _where(w, "content"))
        if role == "assistant":
            if pending:
                raise ValueError(f"{_name(w)}: assistant message before the tool result of call(s) "
                                 f"{sorted(pending)}")
            raw_calls = [] if msg.get("tool_calls") is None else msg["tool_calls"]
            if not isinstance(raw_calls, list):
                raise ValueError(f"{_where(w, 'tool_calls')}: expected a list")
            parsed_calls = [parse_call(c, _where(w, f"tool_calls[{k}]")) for k, c in enumerate(raw_calls)]
            ids = [cid or "" for cid, _ in parsed_calls]
            if len(set(ids)) < len(ids):
                raise ValueError(f"{_where(w, 'tool_calls')}: several calls need distinct ids, got {ids}")
            if not parsed_calls and msg.get("content") is None:
                raise ValueError(f"{_where(w, 'content')}: an assistant message needs content or tool_calls")
            structured = [c for _, c in parsed_calls]
            raw = assistant_text(content, structured if len(structured) > 1 else
                                 (structured[0] if structured else None), call_format)
            turn = _turn(w, msg, raw, len(turns), out, turns, tools, counter, need_tokens,
                         is_call=bool(structured))
            turns.append(turn)
            out.append({"role": "assistant", "content": turn.text})
            if turn.kind == "call":   # structured, or written in the content (an agent that keeps raw text)
                for cid, c in parsed_calls or [(None, parse_tool_call(turn.text))]:
                    # status is set by what answers it: a tool message (executed/skipped/noop) or a user message
                    pending[cid or ""] = Call(round=turn.round, name=c.name, args=c.arguments, status="pending")
                    calls.append(pending[cid or ""])
        elif role == "tool":
            call_id = msg.get("tool_call_id")
            key = call_id if call_id in pending else ("" if "" in pending else None)
            if key is None:
                raise ValueError(f"{_where(w, 'tool_call_id')}: {call_id!r} answers no pending call "
                                 f"(pending: {sorted(pending) or 'none'})")
            c = pending.pop(key)
            payload = _payload(content)
            c.status = ("skipped" if payload == P.SKIPPED_CALL_RESULT else
                        "noop" if payload == P.NOOP_CALL_RESULT else "executed")
            c.result, c.ok, c.error_kind = payload, payload.get("success") is not False, error_kind(payload)
            out.append(P.tool_response_message(content, call_format))
        else:
            role = "system" if role == "developer" else role
            if role == "user" and first_user is None:
                first_user = content
            if pending and role == "user":
                # the loop answers a call it does not run with a user message (hard_no_tool, budget, reasoning rule)
                for c in pending.values():
                    c.status = "rejected"
                    c.reason = _REJECTIONS.get(content, (mode or "hard_no_tool") if content == P.TOOLS_UNAVAILABLE
                                               else content)
                pending.clear()
            elif pending:
                raise ValueError(f"{_name(w)}: a {role} message before the tool result of call(s) "
                                 f"{sorted(pending)}")
            out.append({"role": role, "content": content})
    if pending and not (last_pending and turns and turns[-1].kind == "call"
                        and messages[-1].get("role") == "assistant"):
        raise ValueError(f"messages: call(s) {sorted(pending)} have no tool message; send the tool result, or ask "
                         "the gate about the call itself")
    if first_user is None:
        raise ValueError("messages: no user message (the task's instruction)")
    instruction, prompt_mode, reasoning = split_user_prompt(first_user)
    mode = P.canonical_mode(mode or prompt_mode or "default")
    view = EpisodeView(task=_task(task, instruction, tools), messages=out, turns=turns, calls=calls,
                       round=len(turns), mode=mode, tools=tools)
    return Converted(view=view, reasoning=reasoning, call_format=call_format)


def _turn(i: int | str, msg: dict, raw: str, index: int, before: list[dict], turns: list[Turn], tools: list[dict],
          counter: TokenCounter | None, need_tokens: bool, is_call: bool = False) -> Turn:
    """The loop's record of the generation that wrote ``raw`` (``before``: the loop's messages up to it)."""
    prefill = msg.get("prefill") or ""
    if not isinstance(prefill, str) or (prefill and (index != 0 or not raw.startswith(prefill))):
        raise ValueError(f"{_where(i, 'prefill')}: a response prefill is a string the first assistant turn starts "
                         "with")
    lps = _logprobs(msg.get("logprobs"), _where(i, "logprobs"))
    prompt_tokens, completion_tokens = _usage(msg, _name(i))
    if prompt_tokens is None and counter is not None:
        # the loop's count: the rendered prompt (chat template + tools) plus the prefill, as one text
        prompt_tokens = counter.count_tokens(counter.render(P.template_messages(before), tools) + prefill)
    if completion_tokens is None:
        # the loop's decode count is the generated tokens, one log-prob each
        if lps is not None:
            completion_tokens = len(lps)
        elif counter is not None:
            completion_tokens = counter.count_tokens(raw[len(prefill):])
    if need_tokens and (prompt_tokens is None or completion_tokens is None):
        missing = "usage.prompt_tokens" if prompt_tokens is None else "usage.completion_tokens"
        raise ValueError(f"{_where(i, missing)}: G-STEP reads each turn's token counts; give the completion's "
                         "usage (or its logprobs) with the message, or load the gates with the policy's tokenizer")
    finish = msg.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise ValueError(f"{_where(i, 'finish_reason')}: expected a string, got {type(finish).__name__}")
    prompt_tokens, completion_tokens = prompt_tokens or 0, completion_tokens or 0
    prev = turns[-1].context_len + turns[-1].decode_tokens if turns else 0
    # the loop's classification of the raw text; a structured call is a call whatever its text
    kind = "call" if is_call or parse_tool_call(raw) is not None else "answer" if has_boxed(raw) else "content"
    return Turn(round=index, text=raw, prefill_text=prefill, prefill_tokens=prompt_tokens,
                new_tokens=max(prompt_tokens - prev, 0), context_len=prompt_tokens, decode_tokens=completion_tokens,
                finish_reason=finish, logprobs=lps, kind=kind)


def pending_call(messages: Any, call: Any) -> tuple[list, dict]:
    """``(history, proposing assistant message)`` for a proposed ``call``: an OpenAI tool call, or the assistant
    message that proposes it. A history that already ends with the proposing message (same call id) loses it."""
    if not isinstance(messages, list):
        raise ValueError("messages: expected a list of chat messages")
    if not isinstance(call, dict):
        raise ValueError(f"call: expected an OpenAI tool call ({{id, type, function: {{name, arguments}}}}) or the "
                         f"assistant message proposing it, got {type(call).__name__}")
    if call.get("role") == "assistant":
        calls = call.get("tool_calls")
        if not isinstance(calls, list) or len(calls) != 1:
            raise ValueError("call.tool_calls: the proposing assistant message must hold exactly one tool call")
        return messages, call
    if "function" in call and messages:
        last = messages[-1]
        if (isinstance(last, dict) and last.get("role") == "assistant" and call.get("id") is not None
                and any(isinstance(c, dict) and c.get("id") == call.get("id") for c in last.get("tool_calls") or [])):
            return messages[:-1], {**last, "tool_calls": [call]}
    return messages, {"role": "assistant", "content": None, "tool_calls": [call]}


def call_episode(messages: Any, tools: Any, call: Any, *, task: Task | dict | None = None,
                     mode: str | None = None, call_format: str = "xml",
                     counter: TokenCounter | None = None) -> tuple[EpisodeView, ToolCall]:
    """The loop's ``pre_call(view, call)`` arguments for a proposed ``call`` after ``messages`` (the proposing
    message's other parallel calls, if any, are left out: the loop asks about one call per turn)."""
    history, proposing = pending_call(messages, call)
    whole = episode_from_openai(history + [proposing], tools, task=task, mode=mode, call_format=call_format,
                                counter=counter, last_name="call", last_pending=True)
    view = whole.view
    _, parsed = parse_call(proposing["tool_calls"][0], "call")
    # the moment the hook runs: the proposing turn is recorded, its message and its Call are not yet
    view.messages, view.calls, view.round = view.messages[:-1], view.calls[:-1], len(view.turns) - 1
    return view, parsed


def answer_episode(messages: Any, tools: Any, answer: str, logprobs: list[float] | dict | None = None, *,
                   usage: dict | None = None, finish_reason: str | None = None, task: Task | dict | None = None,
                   mode: str | None = None, call_format: str = "xml",
                   counter: TokenCounter | None = None) -> tuple[EpisodeView, str]:
    """The loop's ``on_answer(view, answer_text)`` arguments for the final answer ``answer`` after ``messages``
    (``logprobs``, ``usage``, ``finish_reason``: of the completion that wrote the answer)."""
    if not isinstance(answer, str):
        raise ValueError(f"answer: expected the answer message's text, got {type(answer).__name__}")
    if not isinstance(messages, list):
        raise ValueError("messages: expected a list of chat messages")
    if parse_tool_call(answer) is not None:     # the loop's order: a turn that holds a call is a call turn
        raise ValueError("answer: this text is a tool call, not a final answer (ask the ToolGate about it)")
    answering = {"role": "assistant", "content": answer, "logprobs": logprobs, "usage": usage,
                 "finish_reason": finish_reason}
    whole = episode_from_openai(messages + [answering], tools, task=task, mode=mode, call_format=call_format,
                                counter=counter, need_tokens=True, last_name="answer")
    view = whole.view
    if not view.turns[-1].text.strip():
        raise ValueError("answer: empty; G-STEP judges the text of a final answer")
    # The loop asks G-STEP about a boxed answer (its answer protocol); a client that does not speak it answers in
    # plain text, and that text is the answer it receives: the same turn for G-STEP, whose featurizer reads the
    # whole text as the answer when there is no box (data_builders/features/gstep.py).
    view.turns[-1].kind = "answer"
    view.messages, view.round = view.messages[:-1], len(view.turns) - 1
    return view, view.turns[-1].text


def first_prompt_messages(messages: Any, *, call_format: str = "xml") -> list[dict]:
    """The messages the probe reads, in the loop's form: the episode before its first generation."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages: expected a non-empty list of chat messages")
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("system", "user"):
            raise ValueError(f"{_where(i, 'role')}: the probe decides before the first generation; only system "
                             f"and user messages come first, got {role!r}")
    return episode_from_openai(messages, None, call_format=call_format).view.messages


def to_openai(messages: Sequence[dict], turns: Sequence[Turn] = (), *, call_format: str = "xml") -> list[dict]:
    """The other direction, for toolwise's own episodes (a trajectory's messages and turns): assistant turns
    with a call get structured ``tool_calls`` (the raw text stays the content) and each turn's generation
    metadata; tool responses become ``tool`` messages. :func:`episode_from_openai` maps the result back to
    the same state."""
    out: list[dict] = []
    k, last_id = 0, None
    for m in messages:
        role, content = m["role"], m["content"]
        if role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": content}
            call = parse_tool_call(content)
            if call is not None:
                last_id = f"call_{k}"
                msg["tool_calls"] = [{"id": last_id, "type": "function",
                                      "function": {"name": call.name, "arguments": serialize(call.arguments)}}]
            if k < len(turns):
                t = turns[k]
                msg.update(usage={"prompt_tokens": t.prefill_tokens, "completion_tokens": t.decode_tokens},
                           logprobs=t.logprobs, finish_reason=t.finish_reason)
                if t.prefill_text:
                    msg["prefill"] = t.prefill_text
            k += 1
            out.append(msg)
        elif role == "tool" or (role == "user" and content.startswith("<tool_response>\n")
                                and content.endswith("\n</tool_response>")):
            body = content if role == "tool" else content[len("<tool_response>\n"):-len("\n</tool_response>")]
            out.append({"role": "tool", "tool_call_id": last_id, "content": body})
        else:
            out.append({"role": role, "content": content})
    return out
