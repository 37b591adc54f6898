"""The one chat renderer: messages + tools → prompt text, with the tokenizer's chat template.

Every backend renders through it (:class:`ChatText`), and so does SFT tokenization
(``trainers/policy/tokenization.py``), so a fine-tune sees exactly the prompt the agent sends at run time.
Needs only a tokenizer: no model, no torch.
"""
from __future__ import annotations

import json
from typing import Any, Sequence


def tool_system_block(tools: Sequence[dict]) -> str:
    """Tool listing for chat templates that ignore ``tools=`` (SmolLM2's does). Hermes/Qwen wording,
    the format When2Tool's xml-format models are prompted with."""
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "# Tools\n\nYou may call one of the following functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        f"{lines}\n</tools>\n\nFor a function call, return a json object with function name and arguments "
        'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
        "<args-json-object>}\n</tool_call>"
    )


def render_chat(tokenizer, messages: Sequence[dict], tools: Sequence[dict] | None = None, *,
                add_generation_prompt: bool = True) -> str:
    """The prompt text for ``messages`` with ``tools``: the chat template, and for templates that ignore
    ``tools=`` the tool listing appended to the system message. The one renderer used by the agent at run
    time and by SFT tokenization at training time, so a fine-tune sees exactly the inference prompt."""
    messages = [dict(m) for m in messages]
    kwargs: dict[str, Any] = {}
    if tools:
        if "tools" in (tokenizer.chat_template or ""):
            kwargs["tools"] = list(tools)
        else:
            block = tool_system_block(tools)
            if messages and messages[0]["role"] == "system":
                messages[0]["content"] = messages[0]["content"] + "\n\n" + block
            else:
                messages.insert(0, {"role": "system", "content": block})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                         **kwargs)


class ChatText:
    """``render`` and ``count_tokens`` from a local tokenizer: every backend shares the one renderer."""

    tokenizer: Any

    def render(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> str:
        return render_chat(self.tokenizer, messages, tools)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    @property
    def max_token_chars(self) -> int:
        """Characters of the longest vocabulary entry, in the tokenizer's own spelling (byte-level BPE spells each
        byte as one character, SentencePiece each character as one, byte fallback as six): so a token covers at
        most this many characters of text, and ``len(text) / max_token_chars`` bounds the token count of ``text``
        from below without tokenizing it."""
        if getattr(self, "_max_token_chars", None) is None:
            self._max_token_chars = max(map(len, self.tokenizer.get_vocab()), default=1) or 1
        return self._max_token_chars
