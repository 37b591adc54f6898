"""The agent's three controller hook points (docs/architecture.md#the-agent-loop-and-its-three-hooks).

Defaults are no-ops, so an agent without controllers behaves exactly like the prompt-mode baseline.
A controller-backed hook subclasses :class:`Hooks` and overrides what it needs; features must come
from ``data_builders.features`` (one featurizer shared by build time and run time).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

from ..tasks.schema import Task
from .parsing import ToolCall
from .trajectory import Call, Turn


@dataclass
class PromptState:
    """What ``pre_generation`` sees: the rendered first prompt and, if the hook asked for them via
    ``hidden_layers``, the last prompt token's hidden states ``[len(layers), d]`` from the same
    prefill pass that generation then continues (no second forward pass)."""

    prompt: str
    messages: list[dict]
    hidden: Any | None = None
    layers: Sequence[int] | None = None


@dataclass
class EpisodeView:
    """Read-only view of an episode in progress, for ``pre_call`` and ``on_answer``: the same typed turns
    and calls the finished :class:`~data_builders.agent.trajectory.Trajectory` will hold."""

    task: Task
    messages: list[dict]
    turns: list[Turn]
    calls: list[Call]
    round: int
    mode: str
    extra: dict[str, Any] = field(default_factory=dict)
    # the OpenAI tool specs the episode offers (what the policy's prompt rendered): ToolGate reads the called
    # tool's schema and description here, so its features need no vocabulary of tool names
    tools: list[dict] = field(default_factory=list)


class Hooks:
    #: hidden-state indices ``pre_generation`` needs (None: no prefill read, nothing computed)
    hidden_layers: Sequence[int] | None = None

    def pre_generation(self, task: Task, state: PromptState) -> str | None:
        """Return a response prefill to append after the generation prompt in round 1, or None."""
        return None

    def pre_call(self, episode: EpisodeView, call: ToolCall) -> Literal["execute", "skip"]:
        """Decide whether a proposed tool call runs; a skip feeds back a fixed no-op tool message."""
        return "execute"

    def on_answer(self, episode: EpisodeView, answer_text: str) -> Literal["commit", "continue"]:
        """Decide whether a final answer is accepted or one verification round is injected."""
        return "commit"
