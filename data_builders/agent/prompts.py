"""Prompt texts of the agent protocol (When2Tool's modes: docs/guide.md#when2tool-prompt-modes; the messages
appended during an episode: docs/guide.md#when2tool-the-protocol-state-machine).

The wording is a paraphrase of the When2Tool originals; every string lives here so a
user reproducing the paper exactly can swap this one module's constants.
"""
from __future__ import annotations

import json

from ..protocol import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

MODES = ("force", "default", "necessary", "sparse", "no_tool", "hard_no_tool")
# Native chain-of-thought (the tool-use-tax paper's (arXiv 2605.00136) NoTool-CoT arm): a math-solver prompt with no tool wording and no
# tool schemas. Kept out of MODES, whose order fixes G-STEP's one-hot mode features (a new entry would change
# every G-STEP checkpoint's input width).
COT_MODE = "cot"
ALL_MODES = MODES + (COT_MODE,)
# When2Tool's names for the same modes, accepted as aliases.
MODE_ALIASES = {"force_tool": "force", "current": "default", "necessary_tool": "necessary", "sparse_tool": "sparse"}
#: every mode name a config may give (the modes, CoT, and the benchmark's aliases)
PROMPT_MODES = ALL_MODES + tuple(MODE_ALIASES)
CALL_FORMATS = ("xml", "native")


def auto_call_format(model_id: str) -> str:
    """What ``call_format="auto"`` resolves to for a policy: ``native`` (Llama 3.1's JSON calls) when the model
    id contains "llama", as When2Tool's harness decides, else ``xml``. The agent loop and the runtime (which
    reads a policy fingerprint) both ask this one function."""
    return "native" if "llama" in model_id.lower() else "xml"


def canonical_mode(mode: str) -> str:
    m = MODE_ALIASES.get(mode, mode)
    if m not in ALL_MODES:
        raise ValueError(f"unknown prompt mode {mode!r}; choose one of {ALL_MODES} (or {tuple(MODE_ALIASES)})")
    return m


def system_prompt(call_format: str = "xml") -> str:
    text = ("You are a helpful assistant that can use tools. Use a tool when it helps, but never make several "
            "tool calls at once. Tool arguments must match the tool's schema exactly; do not invent wrapper fields. ")
    if call_format == "xml":
        text += ("To call a tool, write exactly one <tool_call>...</tool_call> block containing one JSON object "
                 '{"name": <tool name>, "arguments": {...}}. ')
    return text + "When you are done, give the final answer in \\boxed{...}."


LIST_FORMAT_CONTRACT = (
    "Format contract for list tools: there is no tool that sets the list, so pass the current list as `values` in "
    "every call. Use plain (nested) lists, never {\"values\": ...}. Read `current_list` from the latest tool output. "
    "Do one operation per call. The final answer is one plain list literal inside \\boxed{}, not a LaTeX matrix.")

_POLICY = {
    "force": "You must use a tool to solve this task.",
    "default": "You may decide whether to use a tool.",
    "necessary": "Use tools only when they are necessary.",
    "sparse": ("Tool calls are expensive, so aim for zero. Try to solve the task directly and finish without tools "
               "whenever possible."),
    "no_tool": "Do not use any tools.",
    "hard_no_tool": "Do not use any tools.",
}
REASONING_LINE = ("First, in a few sentences, decide whether a tool is needed. If the task can be solved directly, "
                   "solve it without a tool; otherwise use the tool. Then proceed.")
_FINAL_LINE = "When you are done, give the final answer in \\boxed{...}."


COT_SYSTEM = "You are a careful math solver. Solve the problem by reasoning step by step."
COT_INSTRUCTION = "Think step by step, then give the final answer in \\boxed{...}."


def user_prompt(instruction: str, mode: str, reasoning: bool) -> str:
    if canonical_mode(mode) == COT_MODE:
        return f"{instruction}\n\n{COT_INSTRUCTION}"
    lines = ([REASONING_LINE] if reasoning else []) + [_POLICY[canonical_mode(mode)], _FINAL_LINE]
    policy = "\n".join(f"{i}. {line}" for i, line in enumerate(lines, 1))
    return f"{instruction}\n\nResponse policy (required every turn):\n{policy}"


# ---- messages appended during an episode (the benchmark's state machine); all are user-role messages
TOOLS_UNAVAILABLE = "Tools are unavailable for this task. Answer directly and put the final answer in \\boxed{}."
MISSING_REASONING_CALL = "Your tool call lacks reasoning. Write a short reasoning first, then make the tool call."
NO_REASONING_CALL = "Reasoning is not allowed here. Reply with the tool call only."
MISSING_REASONING_ANSWER = "Write a short reasoning before the boxed answer."
NO_REASONING_ANSWER = "Reply with the boxed answer only, without reasoning."
SKIPPED_CALL_RESULT = {"success": False, "message": "[SKIPPED] This tool call was not executed. "
                                                    "Continue without it and answer if you can."}
# tool_access="noop": the call goes through the whole protocol but nothing is computed (the tool-use-tax paper's no-op tool).
NOOP_CALL_RESULT = {"success": True, "result": None, "message": "[NO-OP] Nothing was computed."}
# max_tool_calls: a call past the episode's budget is not executed.
TOOL_BUDGET_USED = ("Tool budget used up. Answer directly without further tool calls and put the final answer "
                    "in \\boxed{}.")
VERIFY_PROMPT = ("Before you finish, verify your answer. If a tool can check it, call the tool; otherwise re-derive "
                 "it step by step. Then give the final answer in \\boxed{}.")


def continue_prompt(mode: str, reasoning: bool, reasoning_check: bool = True) -> str:
    """The nudge after a turn that neither calls a tool nor answers. ``reasoning_check=False`` (free text
    allowed everywhere) drops the "no reasoning text" demand; mode ``cot`` asks for the boxed answer only."""
    if canonical_mode(mode) == COT_MODE:
        return f"Continue. {COT_INSTRUCTION}"
    text = "Continue."
    if canonical_mode(mode) == "sparse":
        text += " Answer now if you can; make at most one high-value tool call only if you are truly blocked."
    if reasoning:
        text += " Reply with exactly one of: short reasoning then a valid tool call, or short reasoning then the final answer in \\boxed{}."
    elif not reasoning_check:
        text += " Reply with exactly one of: a valid tool call, or the final answer in \\boxed{}."
    else:
        text += " Reply with exactly one of: a valid tool call, or the final answer in \\boxed{}, with no reasoning text."
    return text


def tool_response_message(payload_json: str, call_format: str) -> dict:
    if call_format == "native":
        return {"role": "tool", "content": payload_json}
    return {"role": "user", "content": f"<tool_response>\n{payload_json}\n</tool_response>"}


def initial_messages(instruction: str, env_name: str, mode: str, reasoning: bool, call_format: str) -> list[dict]:
    """The benchmark's opening: the system prompt, ListManipulation's format contract, and the user message with
    its policy.
    Mode ``cot``: the math-solver system prompt and the step-by-step instruction, no tool wording at all."""
    if canonical_mode(mode) == COT_MODE:
        return [{"role": "system", "content": COT_SYSTEM},
                {"role": "user", "content": user_prompt(instruction, mode, reasoning)}]
    messages = [{"role": "system", "content": system_prompt(call_format)}]
    if env_name == "ListManipulationEnv":
        messages.append({"role": "system", "content": LIST_FORMAT_CONTRACT})
    messages.append({"role": "user", "content": user_prompt(instruction, mode, reasoning)})
    return messages


def template_messages(messages: list[dict]) -> list[dict]:
    """The message list a chat template sees: a second leading system message (the format contract) is
    merged into the first, since many templates accept only one system message."""
    if len(messages) > 1 and messages[0]["role"] == "system" and messages[1]["role"] == "system":
        merged = {"role": "system", "content": messages[0]["content"] + "\n\n" + messages[1]["content"]}
        return [merged] + list(messages[2:])
    return list(messages)


def tool_call_text(name: str, arguments: dict, call_format: str) -> str:
    """The canonical assistant text of one tool call, which ``parsing.parse_tool_call`` reads back.

    xml: one ``<tool_call>`` block with a JSON object, as the system prompt asks. native: Llama 3.1's JSON
    convention ``{"name": ..., "parameters": {...}}``.
    """
    if call_format == "native":
        return json.dumps({"name": name, "parameters": arguments}, ensure_ascii=False)
    call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{call}\n{TOOL_CALL_CLOSE}"
