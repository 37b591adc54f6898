"""Trajectory records (docs/architecture.md#trajectory): enough to recompute PTE and every metric without
rerunning the model. Stored as JSONL, one episode per line.

One typed family: :class:`Trajectory` holds the task's metadata, the settings it ran under, the chat
``messages`` (plain ``{"role", "content"}`` dicts, the format chat templates take), one :class:`Turn` per
generation, one :class:`Call` per parsed tool call, one :class:`Decision` per hook decision, and the
outcome. The agent loop (``data_builders/agent/loop.py``) builds these objects; every reader (PTE, the
inefficiency patterns, the featurizers, the labelers, the evaluator and its cache, GRPO) takes them.

Schema version 1 is exactly the JSON the agent loop has written since trajectories carried
``schema_version: 1``: ``to_dict`` writes the same keys in the same order (optional ones left out when
they are not set, as the loop did), so files written before the typed schema load unchanged and an
evaluator cache keeps hitting. :meth:`Trajectory.from_dict` is the one validator: a record that breaks the
schema raises :class:`TrajectoryError` naming the task and the field; a record of a newer version is
refused with the version in the message.

Field by field (JSON key = attribute name, except the evaluator cache's ``_task_key``):

* Task metadata: ``task_id`` (int or str, as the task source gives it), ``env``, ``category``,
  ``difficulty``, ``split``, ``expected_steps`` (the denominator of When2Tool's tool-call rate).
* Settings: ``mode``, ``reasoning``, ``call_format``, ``policy`` (backend fingerprint), ``decoding``
  (temperature, top_p, max_new_tokens, seed, max_rounds) and, only when they differ from the defaults, the
  factorized framework's interventions ``tool_access``, ``max_tool_calls``, ``reasoning_check``.
* The episode: ``messages``, ``turns``, ``calls``, ``decisions``.
* Outcome: ``final_response``, ``answer`` (its boxed content), ``gold``, ``correct``, ``rounds``
  (= number of turns), ``ended`` (answer | max_rounds | context_length | duplicate_call), the counters
  ``tool_calls`` (executed or no-op calls), ``skipped_calls``, ``rejected_calls``, ``malformed_calls``,
  ``format_errors``, and When2Tool's cost terms ``generation_tokens``, ``appended_prompt_tokens``,
  ``token_cost`` (docs/guide.md#when2tool-scoring).
* Added by the evaluator: ``probe_p`` (a composed Probe&Prefill arm's probe probability, never cached) and
  ``task_key`` (JSON ``_task_key``: the cache's per-task key, written last).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

SCHEMA_VERSION = 1

TURN_KINDS = ("call", "answer", "content")
CALL_STATUSES = ("executed", "noop", "skipped", "rejected")
HOOKS = ("pre_generation", "pre_call", "on_answer")
ENDINGS = ("answer", "max_rounds", "context_length", "duplicate_call")
ROLES = ("system", "user", "assistant", "tool")


def error_kind(payload: dict) -> str | None:
    """Classify a tool payload by the step of the tool runtime's pipeline that produced it; None when it
    succeeded."""
    if payload.get("success", True) is not False:
        return None
    if isinstance(payload.get("error_kind"), str):    # a tool source's own classification (timeout, crash, ...)
        return payload["error_kind"]
    msg = str(payload.get("message", ""))
    if msg.startswith("[SKIPPED]"):
        return "skipped"
    if msg.startswith("Tool ") and msg.endswith("not available in this task."):
        return "unavailable_tool"
    if msg.startswith("Missing required parameter"):
        return "missing_param"
    if msg.startswith("Parameter ") and " should have type " in msg:
        return "bad_type"
    if msg.startswith("Argument '") and (" too long " in msg or " too many " in msg or " too large " in msg):
        return "argument_limit"
    if msg.startswith("[TOOL_RUNTIME_ERROR]"):
        return "runtime_error"
    return "tool_error"


# ---------------------------------------------------------------------------------------------- errors
def executed_calls(calls: Iterable["Call"]) -> list[tuple[str, dict]]:
    """The calls that ran in the environment, as ``(name, arguments)`` in order: what a scorer that judges calls
    reads (``score_task(..., calls=)``). A skipped, no-op or rejected call never reached a tool, so it is not one."""
    return [(c.name, c.args) for c in calls if c.status == "executed"]


class TrajectoryError(ValueError):
    """A trajectory record breaks the schema, or lacks a field a metric needs. ``task`` is its task id (None
    when unknown), ``field`` the offending field as a path (``turns[1].decode_tokens``)."""

    def __init__(self, task: Any, field_name: str, problem: str, where: str | None = None):
        self.task, self.field, self.problem, self.where = task, field_name, problem, where
        who = f"task {task!r}" if task is not None else "trajectory"
        super().__init__(f"{where + ': ' if where else ''}{who}: field '{field_name}': {problem}")


class _Check:
    """Type checks that raise :class:`TrajectoryError` for one record."""

    def __init__(self, task: Any):
        self.task = task

    def fail(self, name: str, problem: str):
        raise TrajectoryError(self.task, name, problem)

    def is_(self, ok: bool, name: str, want: str, value: Any) -> None:
        if not ok:
            self.fail(name, f"must be {want}, got {_show(value)}")

    def str_(self, value: Any, name: str, *, optional: bool = False, choices: tuple[str, ...] = ()) -> None:
        if optional and value is None:
            return
        self.is_(isinstance(value, str), name, "a string" + (" or null" if optional else ""), value)
        if choices and value not in choices:
            self.fail(name, f"must be one of {', '.join(choices)}, got {value!r}")

    def count(self, value: Any, name: str, *, optional: bool = False) -> None:
        if optional and value is None:
            return
        self.is_(_is_int(value) and value >= 0, name, "an integer >= 0" + (" or null" if optional else ""), value)

    def number(self, value: Any, name: str, *, optional: bool = False) -> None:
        if optional and value is None:
            return
        self.is_(_is_number(value) and math.isfinite(value), name,
                 "a finite number" + (" or null" if optional else ""), value)

    def bool_(self, value: Any, name: str, *, optional: bool = False) -> None:
        if optional and value is None:
            return
        self.is_(isinstance(value, bool), name, "true or false" + (" or null" if optional else ""), value)

    def dict_(self, value: Any, name: str, *, optional: bool = False) -> None:
        if optional and value is None:
            return
        self.is_(isinstance(value, dict), name, "an object" + (" or null" if optional else ""), value)

    def numbers(self, value: Any, name: str, *, ints: bool = False) -> None:
        """A list of numbers (log-probs may be -inf/NaN: the featurizer clips them), or of ints."""
        if value is None:
            return
        self.is_(isinstance(value, list), name, "a list or null", value)
        ok = _is_int if ints else _is_number
        for i, x in enumerate(value):
            if not ok(x):
                self.fail(f"{name}[{i}]", f"must be {'an integer' if ints else 'a number'}, got {_show(x)}")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _show(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 80 else text[:77] + '...'}"


def _json_name(f: dataclasses.Field) -> str:
    return f.metadata.get("json", f.name)


def _keys(d: Any, cls: type, where: str, check: _Check) -> dict:
    """``d``'s items as constructor arguments of ``cls``: refuses a non-object, unknown keys and missing
    required ones (a dataclass field without a default). ``where`` prefixes field names ("" at top level)."""
    at = (lambda name: f"{where}.{name}") if where else (lambda name: name)
    if not isinstance(d, Mapping):
        check.fail(where or "trajectory", f"must be an object, got {_show(d)}")
    fields = {_json_name(f): f for f in dataclasses.fields(cls)}
    out = {}
    for key, value in d.items():
        if key not in fields:
            check.fail(at(key), f"unknown field (schema version {SCHEMA_VERSION} knows: {', '.join(fields)})")
        out[fields[key].name] = value
    for key, f in fields.items():
        if f.name not in out and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            check.fail(at(key), "missing")
    return out


def _emit(obj: Any, skip_none: frozenset[str]) -> dict[str, Any]:
    """The JSON object of a record: fields in declaration order, those in ``skip_none`` left out when None."""
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if value is None and f.name in skip_none:
            continue
        out[f.name] = value
    return out


# ---------------------------------------------------------------------------------------------- records
@dataclass(kw_only=True)
class Turn:
    """One generation. ``text`` is prefill + generated text; ``prefill_tokens`` (= ``context_len``) the whole
    prompt of the turn, ``new_tokens`` the part not present at the end of the previous turn (cache-reuse PTE),
    ``cached_tokens`` what the engine did not recompute (absent in files written before the loop recorded
    it). ``logprobs`` rounded per-token log-probs (null when disabled); ``token_ids``/``raw_logprobs`` only
    with ``keep_token_ids`` (RL). ``kind`` is set by the state machine right after the turn is generated."""

    round: int
    text: str
    prefill_text: str = ""
    prefill_tokens: int
    new_tokens: int | None = None
    cached_tokens: int | None = None
    context_len: int
    decode_tokens: int
    finish_reason: str | None = None
    wall_s: float | None = None
    logprobs: list[float] | None = None
    token_ids: list[int] | None = None
    raw_logprobs: list[float] | None = None
    kind: str | None = None

    _SKIP_NONE = frozenset({"new_tokens", "cached_tokens", "finish_reason", "wall_s", "token_ids",
                            "raw_logprobs", "kind"})

    def to_dict(self) -> dict[str, Any]:
        return _emit(self, self._SKIP_NONE)

    @classmethod
    def _from(cls, d: Any, where: str, check: _Check) -> "Turn":
        return cls(**_keys(d, cls, where, check))

    def _validate(self, where: str, check: _Check) -> None:
        check.count(self.round, f"{where}.round")
        check.str_(self.text, f"{where}.text")
        check.str_(self.prefill_text, f"{where}.prefill_text")
        for name in ("prefill_tokens", "context_len", "decode_tokens"):
            check.count(getattr(self, name), f"{where}.{name}")
        for name in ("new_tokens", "cached_tokens"):
            check.count(getattr(self, name), f"{where}.{name}", optional=True)
        check.str_(self.finish_reason, f"{where}.finish_reason", optional=True)
        check.number(self.wall_s, f"{where}.wall_s", optional=True)
        check.numbers(self.logprobs, f"{where}.logprobs")
        check.numbers(self.token_ids, f"{where}.token_ids", ints=True)
        check.numbers(self.raw_logprobs, f"{where}.raw_logprobs")
        # A finished episode classified every turn (the loop sets kind right after generating it).
        check.str_(self.kind, f"{where}.kind", choices=TURN_KINDS)


@dataclass(kw_only=True)
class Call:
    """One parsed tool call. ``status``: executed (ran in the environment), noop (the factorized framework's
    no-op tool), skipped (the pre-call gate said skip) or rejected (never ran: protocol, mode or budget;
    ``reason`` says which). Every call that was not rejected has the tool ``result`` payload, ``ok`` and
    ``error_kind`` (None on success, else :func:`error_kind` of the payload)."""

    round: int
    name: str
    args: dict
    status: str
    reason: str | None = None
    result: dict | None = None
    ok: bool | None = None
    error_kind: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"round": self.round, "name": self.name, "args": self.args, "status": self.status}
        if self.status == "rejected":
            out["reason"] = self.reason
        else:
            out.update(result=self.result, ok=self.ok, error_kind=self.error_kind)
        return out

    @classmethod
    def _from(cls, d: Any, where: str, check: _Check) -> "Call":
        kw = _keys(d, cls, where, check)
        check.str_(kw["status"], f"{where}.status", choices=CALL_STATUSES)
        # The loop writes result/ok/error_kind (error_kind null on success) on every call that was not
        # rejected, and reason on every rejected one: an absent key is a broken record, not a null.
        needed = ("reason",) if kw.get("status") == "rejected" else ("result", "ok", "error_kind")
        for name in needed:
            if name not in kw:
                check.fail(f"{where}.{name}", f"missing (required when status is {kw.get('status')!r})")
        return cls(**kw)

    def _validate(self, where: str, check: _Check) -> None:
        check.count(self.round, f"{where}.round")
        check.str_(self.name, f"{where}.name")
        check.dict_(self.args, f"{where}.args")
        check.str_(self.status, f"{where}.status", choices=CALL_STATUSES)
        if self.status == "rejected":
            check.str_(self.reason, f"{where}.reason")
            for name in ("result", "ok", "error_kind"):
                if getattr(self, name) is not None:
                    check.fail(f"{where}.{name}", "must be absent on a rejected call (it never ran)")
        else:
            if self.reason is not None:
                check.fail(f"{where}.reason", f"only rejected calls have a reason (status is {self.status!r})")
            check.dict_(self.result, f"{where}.result")
            check.bool_(self.ok, f"{where}.ok")
            check.str_(self.error_kind, f"{where}.error_kind", optional=True)


@dataclass(kw_only=True)
class Decision:
    """One hook decision: ``pre_generation`` (the prefill text, or None), ``pre_call`` (execute | skip, with
    the ``call``'s tool name), ``on_answer`` (commit | continue, or the loop's own stop_no_progress /
    stop_duplicate_call)."""

    hook: str
    round: int
    call: str | None = None
    decision: str | None

    def to_dict(self) -> dict[str, Any]:
        return _emit(self, frozenset({"call"}))

    @classmethod
    def _from(cls, d: Any, where: str, check: _Check) -> "Decision":
        return cls(**_keys(d, cls, where, check))

    def _validate(self, where: str, check: _Check) -> None:
        check.str_(self.hook, f"{where}.hook", choices=HOOKS)
        check.count(self.round, f"{where}.round")
        if self.hook == "pre_call":
            check.str_(self.call, f"{where}.call")
        elif self.call is not None:
            check.fail(f"{where}.call", f"only pre_call decisions name a call (hook is {self.hook!r})")
        check.str_(self.decision, f"{where}.decision", optional=self.hook == "pre_generation")


@dataclass(kw_only=True)
class Trajectory:
    """One episode of one task under one arm (see the module docstring for every field)."""

    schema_version: int = SCHEMA_VERSION
    task_id: int | str
    env: str
    category: str
    difficulty: str
    split: str
    expected_steps: int
    mode: str
    reasoning: bool
    call_format: str
    policy: str
    decoding: dict[str, Any]
    messages: list[dict[str, Any]]
    turns: list[Turn]
    calls: list[Call]
    decisions: list[Decision]
    final_response: str
    answer: str
    gold: str
    correct: bool
    rounds: int
    ended: str
    tool_calls: int
    skipped_calls: int
    rejected_calls: int
    malformed_calls: int
    format_errors: int
    generation_tokens: int
    appended_prompt_tokens: int
    token_cost: float
    # The factorized framework's interventions, recorded only when they differ from the defaults.
    tool_access: str | None = None
    max_tool_calls: int | None = None
    reasoning_check: bool | None = None
    # Added by the evaluator.
    probe_p: float | None = None
    task_key: str | None = field(default=None, metadata={"json": "_task_key"})

    _OPTIONAL = frozenset({"tool_access", "max_tool_calls", "reasoning_check", "probe_p", "task_key"})

    @property
    def never_generated(self) -> bool:
        """The episode ended at [CONTEXT_LENGTH_EXCEEDED] before its first generation: the task's prompt alone
        leaves no room for ``max_new_tokens`` in the context."""
        return self.ended == "context_length" and self.rounds == 0

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """The JSONL record, key for key what the agent loop wrote before the typed schema. Nested lists
        (messages, payloads, log-probs) are shared with this object, not copied."""
        out = _emit(self, self._OPTIONAL)
        out["turns"] = [t.to_dict() for t in self.turns]
        out["calls"] = [c.to_dict() for c in self.calls]
        out["decisions"] = [d.to_dict() for d in self.decisions]
        if "task_key" in out:
            out["_task_key"] = out.pop("task_key")     # its JSON name, last, where the cache has always put it
        return out

    @classmethod
    def from_dict(cls, d: Any) -> "Trajectory":
        """Parse and validate one JSONL record; raises :class:`TrajectoryError` naming the task and field."""
        task = d.get("task_id") if isinstance(d, Mapping) else None
        check = _Check(task)
        if not isinstance(d, Mapping):
            check.fail("trajectory", f"must be an object, got {_show(d)}")
        if "schema_version" not in d:
            check.fail("schema_version", f"missing (toolwise writes schema version {SCHEMA_VERSION})")
        version = d["schema_version"]
        if not _is_int(version) or not 1 <= version <= SCHEMA_VERSION:
            newer = _is_int(version) and version > SCHEMA_VERSION
            check.fail("schema_version", f"version {version!r} is " + (
                f"newer than this toolwise reads ({SCHEMA_VERSION}): update toolwise to read it" if newer else
                f"not a trajectory schema version (this toolwise reads 1..{SCHEMA_VERSION})"))
        kw = _keys(d, cls, "", check)
        for name, item in (("turns", Turn), ("calls", Call), ("decisions", Decision)):
            value = kw[name]
            check.is_(isinstance(value, list), name, "a list", value)
            kw[name] = [item._from(x, f"{name}[{i}]", check) for i, x in enumerate(value)]
        traj = cls(**kw)
        traj.validate()
        return traj

    # ------------------------------------------------------------------ the validator
    def validate(self) -> "Trajectory":
        """Check every field's type and the record's invariants; raises :class:`TrajectoryError` naming the
        task id and the field. Returns self."""
        check = _Check(self.task_id)
        c = check
        c.is_(_is_int(self.task_id) or isinstance(self.task_id, str), "task_id", "an integer or a string",
              self.task_id)
        c.is_(self.schema_version == SCHEMA_VERSION, "schema_version", f"{SCHEMA_VERSION}", self.schema_version)
        for name in ("env", "category", "difficulty", "split", "mode", "call_format", "policy",
                     "final_response", "answer", "gold"):
            c.str_(getattr(self, name), name)
        c.str_(self.ended, "ended", choices=ENDINGS)
        for name in ("expected_steps", "rounds", "tool_calls", "skipped_calls", "rejected_calls",
                     "malformed_calls", "format_errors", "generation_tokens", "appended_prompt_tokens"):
            c.count(getattr(self, name), name)
        c.number(self.token_cost, "token_cost")
        c.bool_(self.reasoning, "reasoning")
        c.bool_(self.correct, "correct")
        c.dict_(self.decoding, "decoding")
        c.str_(self.tool_access, "tool_access", optional=True)
        c.count(self.max_tool_calls, "max_tool_calls", optional=True)
        c.bool_(self.reasoning_check, "reasoning_check", optional=True)
        c.number(self.probe_p, "probe_p", optional=True)
        c.str_(self.task_key, "_task_key", optional=True)
        c.is_(isinstance(self.messages, list), "messages", "a list", self.messages)
        for i, m in enumerate(self.messages):
            c.is_(isinstance(m, dict), f"messages[{i}]", "an object", m)
            c.str_(m.get("role"), f"messages[{i}].role", choices=ROLES)
            c.str_(m.get("content"), f"messages[{i}].content")
        for name, kind in (("turns", Turn), ("calls", Call), ("decisions", Decision)):
            items = getattr(self, name)
            c.is_(isinstance(items, list), name, "a list", items)
            for i, item in enumerate(items):
                c.is_(isinstance(item, kind), f"{name}[{i}]", f"a {kind.__name__}", item)
                item._validate(f"{name}[{i}]", check)
        if self.rounds != len(self.turns):
            c.fail("rounds", f"is {self.rounds} but the record has {len(self.turns)} turns")
        return self


# ---------------------------------------------------------------------------------------------- files
def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``path`` atomically (temp file + rename), so a crash never leaves a truncated file behind. The temp
    file's name is this writer's own (pid and random suffix, created exclusively), so writers of the same path
    at once (two runs sharing a directory) never write into one file or rename each other's: the last rename
    wins with one writer's whole file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
    try:
        # O_EXCL: never an existing file; mode 0o666 under the umask, as open() gives (mkstemp's 0600 would
        # make a cache on a shared file system unreadable to the other users)
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_jsonl(path: str | Path, records: Iterable[dict]) -> Path:
    """One JSON record per line, written atomically (:func:`write_text_atomic`)."""
    return write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def write_trajectories(path: str | Path, trajectories: Iterable[Trajectory]) -> Path:
    """:func:`write_jsonl` of typed trajectories (atomic)."""
    return write_jsonl(path, (t.to_dict() for t in trajectories))


def read_trajectories(path: str | Path) -> Iterator[Trajectory]:
    """Typed trajectories of a JSONL file; a bad record raises :class:`TrajectoryError` naming the file,
    the line, the task and the field."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: line {n}: not valid JSON ({e.msg})") from e
            try:
                yield Trajectory.from_dict(record)
            except TrajectoryError as e:
                raise TrajectoryError(e.task, e.field, e.problem, where=f"{path}: line {n}") from None


def summarize(trajectories: list[Trajectory]) -> dict[str, Any]:
    """Aggregate metrics of a rollout; definitions are in the README ("What the numbers mean")."""
    n = len(trajectories)
    if n == 0:
        return {"tasks": 0}
    turns = sum(len(t.turns) for t in trajectories)
    return {
        "tasks": n,
        "accuracy": sum(t.correct for t in trajectories) / n,
        "tool_calls_per_task": sum(t.tool_calls for t in trajectories) / n,
        "tool_call_rate": sum(t.tool_calls for t in trajectories) / sum(t.expected_steps for t in trajectories),
        "format_error_rate": sum(t.format_errors for t in trajectories) / max(turns, 1),
        "malformed_calls_per_task": sum(t.malformed_calls for t in trajectories) / n,
        "tokens_per_task": sum(sum(tr.decode_tokens for tr in t.turns) for t in trajectories) / n,
        "prefill_tokens_per_task": sum(sum(tr.prefill_tokens for tr in t.turns) for t in trajectories) / n,
        "token_cost_per_task": sum(t.token_cost for t in trajectories) / n,
        "rounds_per_task": sum(t.rounds for t in trajectories) / n,
        # Episodes cut off at [CONTEXT_LENGTH_EXCEEDED], and those of them that never generated (the task's prompt
        # alone overflows the context): scored wrong as in the benchmark, so a run says how many.
        "context_exceeded": sum(t.ended == "context_length" for t in trajectories),
        "context_exceeded_before_generating": sum(t.never_generated for t in trajectories),
    }
