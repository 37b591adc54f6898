"""The capture store's records (written by ``runtime/serve/capture.py``; one JSON line per request) read back, and
the decision moments they hold.

A conversation is a chain of requests: a request's response that returned tool calls is followed by the first
later request that carries one of their results (``tool_call_id``). Following the chain from any request to a
response with no call gives the conversation's **final answer**, the reference the gold-free labels compare with
(data_builders/points/free_labels.py). The moments, one list per decision-point kind:

* ``flip``: each call a response returned (a call the client's ``tool_choice`` forced is the client's, not the
  model's: none) whose result came back, with the messages before it and that result;
* ``probe``: each conversation's first request (no assistant message yet) that offered tools and left the choice to
  the model (``tool_choice`` auto);
* ``commit``: each response that is a final answer, with the completion's log-probs, token counts and finish
  reason as the upstream returned them (captured while G-STEP was loaded, in shadow or enforce mode: the endpoint
  asks for log-probs only then).

A moment is a plain JSON-able dict (the build ships shards of them to Ray workers): ``id`` (request id, and call id
for a call), ``conversation`` (the chain's first request id: its split), ``messages``, ``tools``, ``final``
(None: the conversation never answered) and the kind's own fields.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class CaptureRead:
    records: list[dict] = field(default_factory=list)
    incomplete_lines: int = 0       # cut by a crash mid-write (at most one per file)
    files: int = 0


def read_capture(directory: str | Path) -> CaptureRead:
    """Every stored record of ``directory`` in write order, with ``call_results``: for each call the record's
    response returned (``response.tool_calls``), the tool result a later request of the conversation carried
    (the first later record carrying its ``tool_call_id``; absent when the agent never sent it back). A line a crash cut is skipped and counted;
    any other unreadable line is an error naming the file and line."""
    out = CaptureRead()
    for path in sorted(Path(directory).glob("capture-*.jsonl")):
        out.files += 1
        lines = path.read_bytes().split(b"\n")
        for i, line in enumerate(lines, 1):
            if not line:
                continue
            try:
                out.records.append(json.loads(line))
            except ValueError as e:
                if i == len(lines):        # the last line, without its newline: written when the process died
                    out.incomplete_lines += 1
                    continue
                raise ValueError(f"{path}:{i}: not a capture record: {e}") from e
    # newest first: each call is answered by the first later request that carries its id (ids a server reuses
    # across conversations, e.g. call_0, link to their own conversation's next request)
    later: dict[str, Any] = {}
    for record in reversed(out.records):
        calls = (record.get("response") or {}).get("tool_calls") or []
        record["call_results"] = {c["id"]: later[c["id"]] for c in calls if c.get("id") in later}
        later.update(record.get("results") or {})
    return out



def _calls(record: dict) -> list[dict]:
    return (record.get("response") or {}).get("tool_calls") or []


def _forced(tool_choice: Any) -> bool:
    return tool_choice == "required" or isinstance(tool_choice, dict)


def conversations(records: list[dict]) -> tuple[list[int | None], list[int]]:
    """For each record: the index of the conversation's next record (the first later one carrying a result of a
    call this one's response returned; None: the chain ends here) and of the conversation's first record."""
    nxt: list[int | None] = [None] * len(records)
    root = list(range(len(records)))
    waiting: dict[str, int] = {}        # call id -> the record whose response returned it, until a result comes
    for i, record in enumerate(records):
        for call_id in record.get("results") or {}:
            j = waiting.pop(call_id, None)
            if j is not None and nxt[j] is None:
                nxt[j], root[i] = i, root[j]
        for call in _calls(record):
            if call.get("id"):
                waiting[call["id"]] = i
    return nxt, root


def final_answers(records: list[dict], nxt: list[int | None]) -> list[str | None]:
    """Each record's conversation's final answer: the text of the first response down its chain with no call."""
    out: list[str | None] = [None] * len(records)
    for i in reversed(range(len(records))):
        response = records[i].get("response") or {}
        if not _calls(records[i]):
            text = response.get("content")
            out[i] = text if isinstance(text, str) and text.strip() else None
        elif nxt[i] is not None:
            out[i] = out[nxt[i]]
    return out


def moments(records: list[dict], kind: str) -> tuple[list[dict], dict[str, int]]:
    """The ``kind`` moments of ``records`` (see the module doc) and, by reason, the ones left out."""
    nxt, root = conversations(records)
    final = final_answers(records, nxt)
    out: list[dict] = []
    left: dict[str, int] = {}

    def skip(reason: str) -> None:
        left[reason] = left.get(reason, 0) + 1

    for i, r in enumerate(records):
        base = {"conversation": str(records[root[i]].get("request_id")), "tools": r.get("tools") or [],
                "final": final[i], "record": i}
        context = list(r.get("messages") or []) + list(r.get("injected") or [])
        if kind == "flip":
            if _forced(r.get("tool_choice")):
                continue
            results = r.get("call_results") or {}
            for call in _calls(r):
                if call.get("id") not in results:
                    skip("call result never sent back")
                    continue
                out.append({**base, "id": f"{r.get('request_id')}:{call['id']}", "messages": context, "call": call,
                            "result": results[call["id"]]})
        elif kind == "probe":
            messages = r.get("messages") or []
            if any(isinstance(m, dict) and m.get("role") != "system" and m.get("role") != "user" for m in messages):
                continue        # not a conversation's first request
            if not base["tools"] or r.get("tool_choice") not in (None, "auto"):
                skip("first request without a tool decision (no tools, or tool_choice set)")
                continue
            out.append({**base, "id": str(r.get("request_id")), "messages": messages})
        elif kind == "commit":
            response = r.get("response") or {}
            if _calls(r) or not (response.get("content") or "").strip():
                continue
            turn = (r.get("turns") or [None])[-1]
            if not turn or (turn.get("message") or {}).get("content") != response.get("content"):
                skip("answer without its upstream turn")
                continue
            if not ((turn.get("logprobs") or {}).get("content")):
                skip("answer without token log-probs (capture with G-STEP loaded, shadow or enforce)")
                continue
            out.append({**base, "id": str(r.get("request_id")), "messages": context, "answer": response["content"],
                        "logprobs": turn["logprobs"], "usage": turn.get("usage"),
                        "finish_reason": turn.get("finish_reason")})
        else:
            raise ValueError(f"capture moments: unknown kind {kind!r}")
    return out, left


def split_of(conversation: str, test_fraction: float, val_fraction: float, seed: int) -> str:
    """A conversation's split, by a hash of its first request id: every moment of a conversation in one split."""
    h = int(hashlib.sha256(f"{seed}:{conversation}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "test" if h < test_fraction else "val" if h < test_fraction + val_fraction else "train"


def moments_hash(items: list[dict]) -> str:
    """Content hash of a moment list (a capture build's identity, as a task build's is its tasks')."""
    h = hashlib.sha256()
    for m in items:
        h.update(json.dumps(m, sort_keys=True, ensure_ascii=False, default=str).encode())
    return h.hexdigest()[:16]
