"""Hand-made typed trajectories for tests: every required field gets a plain default, so a test states only
what it is about. The objects pass ``Trajectory.validate()`` unless a test breaks them on purpose."""
from __future__ import annotations

from typing import Any, Sequence

from data_builders.agent.trajectory import Call, Decision, Trajectory, Turn


def make_turn(round: int = 0, text: str = "\\boxed{1}", *, kind: str | None = None, prefill_tokens: int = 10,
              context_len: int | None = None, decode_tokens: int = 5, new_tokens: int | None = None,
              **fields: Any) -> Turn:
    """A turn as the loop records it; ``kind`` defaults to answer/content by whether the text has a box,
    ``context_len`` and ``new_tokens`` to ``prefill_tokens``."""
    if kind is None:
        kind = "answer" if "\\boxed{" in text else "content"
    fields.setdefault("cached_tokens", 0)
    fields.setdefault("finish_reason", "eos")
    fields.setdefault("wall_s", 0.1)
    return Turn(round=round, text=text, kind=kind, prefill_tokens=prefill_tokens,
                context_len=prefill_tokens if context_len is None else context_len, decode_tokens=decode_tokens,
                new_tokens=prefill_tokens if new_tokens is None else new_tokens, **fields)


def make_call(round: int = 0, name: str = "evaluate_expression", args: dict | None = None, *,
              status: str = "executed", result: dict | None = None, error_kind: str | None = None,
              reason: str | None = None) -> Call:
    """A call as the loop records it: rejected ones carry a reason, the others result/ok/error_kind
    (``ok`` follows the payload's ``success``)."""
    args = {} if args is None else args
    if status == "rejected":
        return Call(round=round, name=name, args=args, status=status, reason=reason or "hard_no_tool")
    result = {"success": True, "result": 1} if result is None else result
    return Call(round=round, name=name, args=args, status=status, result=result,
                ok=result.get("success") is not False, error_kind=error_kind)


def make_trajectory(turns: Sequence[Turn] = (), calls: Sequence[Call] = (), *, task_id: Any = "t/0",
                    decisions: Sequence[Decision] = (), messages: list[dict] | None = None,
                    instruction: str = "Answer with only the number: 1", **fields: Any) -> Trajectory:
    """A finished episode; ``rounds`` is the number of turns, ``final_response`` the last answer turn's text."""
    turns = list(turns)
    final = turns[-1].text if turns and turns[-1].kind == "answer" else ""
    defaults = dict(
        env="CalculatorEnv", category="A", difficulty="easy", split="test", expected_steps=1, mode="default",
        reasoning=False, call_format="xml", policy="scripted@0",
        decoding={"temperature": 0.0, "top_p": 1.0, "max_new_tokens": 256, "seed": 0, "max_rounds": 10},
        final_response=final, answer="", gold="1", correct=False, ended="answer" if final else "max_rounds",
        tool_calls=sum(c.status in ("executed", "noop") for c in calls),
        skipped_calls=sum(c.status == "skipped" for c in calls),
        rejected_calls=sum(c.status == "rejected" for c in calls), malformed_calls=0, format_errors=0,
        generation_tokens=sum(t.decode_tokens for t in turns), appended_prompt_tokens=0, token_cost=0.0)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": instruction}] \
        if messages is None else messages
    return Trajectory(task_id=task_id, messages=messages, turns=turns, calls=list(calls),
                      decisions=list(decisions), rounds=len(turns), **{**defaults, **fields})
