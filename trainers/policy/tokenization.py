"""Chat conversations → (input_ids, assistant_masks) with the agent's own renderer.

The loss covers every assistant turn (tool calls and the final answer) plus the end-of-turn token that
makes generation stop; system, user and tool-response tokens are context only. Text is produced by
``render_chat``, the function the agent prompts with, so training and inference see the same bytes.
SmolLM2's template has no ``{% generation %}`` markers, so TRL's ``assistant_only_loss`` cannot derive
the mask itself; it is computed here from character offsets and handed to TRL pre-tokenized.
"""
from __future__ import annotations

import json
from typing import Sequence

from data_builders.backends.chat import render_chat


class ConversationTooLong(ValueError):
    pass


def assistant_spans(tokenizer, messages: Sequence[dict], tools: Sequence[dict] | None) -> tuple[str, list[tuple[int, int]]]:
    """The full conversation text and the character span of each assistant reply (content + end-of-turn)."""
    full = render_chat(tokenizer, messages, tools, add_generation_prompt=False)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prefix = render_chat(tokenizer, messages[:i], tools, add_generation_prompt=True)
        through = render_chat(tokenizer, messages[: i + 1], tools, add_generation_prompt=False)
        if not full.startswith(prefix) or not full.startswith(through) or not through[len(prefix):].startswith(m["content"]):
            raise ValueError("chat template is not prefix-stable; cannot locate assistant turns")
        end = len(prefix) + len(m["content"])
        # Include the end-of-turn marker the template writes right after the reply (e.g. "<|im_end|>"),
        # but not the newline that follows it.
        tail = through[end:]
        eos = tokenizer.eos_token or ""
        if eos and tail.startswith(eos):
            end += len(eos)
        spans.append((len(prefix), end))
    return full, spans


def tokenize_conversation(tokenizer, messages: Sequence[dict], tools: Sequence[dict] | str | None,
                          max_length: int | None = None) -> dict:
    if isinstance(tools, str):
        tools = json.loads(tools)
    text, spans = assistant_spans(tokenizer, messages, tools)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    if max_length and len(ids) > max_length:
        raise ConversationTooLong(f"{len(ids)} tokens > max_length {max_length}")
    mask = [int(any(s <= a and b <= e and b > a for s, e in spans)) for a, b in offsets]
    if not any(mask):
        raise ValueError("conversation has no assistant tokens")
    return {"input_ids": ids, "assistant_masks": mask}
