"""The OpenAI chat-completions wire format the endpoint accepts and expects back from its upstream (pydantic),
and the OpenAI-style error every refusal is sent as.

Only what the gates read is typed; every other field a client sends (sampling parameters, ``tool_choice``,
``response_format``, vendor extras) is allowed and forwarded to the upstream untouched."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator


class APIError(Exception):
    """A refusal sent to the client as ``{"error": {"message", "type", "param", "code"}}`` (OpenAI's shape)."""

    TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
             405: "invalid_request_error", 408: "invalid_request_error", 413: "invalid_request_error",
             502: "upstream_error", 504: "upstream_timeout"}

    def __init__(self, status: int, message: str, *, code: str, param: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param, self.headers = status, message, code, param, headers

    def body(self) -> dict:
        kind = self.TYPES.get(self.status, "invalid_request_error" if self.status < 500 else "server_error")
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCall(_Open):
    name: str
    arguments: str          # a JSON string, as OpenAI sends it


class ToolCall(_Open):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _shape(self) -> "Message":
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id")
        if self.role != "assistant" and self.content is None:
            raise ValueError(f"a {self.role} message needs content")
        if self.role == "assistant" and self.content is None and not self.tool_calls:
            raise ValueError("an assistant message needs content or tool_calls")
        return self


class FunctionSpec(_Open):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(_Open):
    type: Literal["function"]
    function: FunctionSpec


class NamedFunction(_Open):
    name: str


class NamedToolChoice(_Open):
    type: Literal["function"]
    function: NamedFunction


class ChatRequest(_Open):
    model: str
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = None
    # OpenAI's values: none = answer without a call, auto = the model decides, required = some call, a named
    # function = that call. The gates' own decisions (the probe's included) are for "auto" (or no value) only.
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    stream: bool | None = False
    logprobs: bool | None = None
    n: int | None = Field(default=None, ge=1)
    # sampling parameters within OpenAI's documented ranges: outside them an engine fails (a 500 from torch) or
    # samples nonsense, so they are refused here with 400 naming the field
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)     # OpenAI's: a 64-bit integer
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)

    @field_validator("tool_choice")
    @classmethod
    def _choice_among_tools(cls, choice: Any, info: ValidationInfo) -> Any:
        names = [t.function.name for t in info.data.get("tools") or []]
        if choice == "required" and not names:
            raise ValueError("'required' needs tools to call: send tools, or tool_choice 'none' / 'auto'")
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise ValueError(f"function {choice.function.name!r} is not among the request's tools {names}")
        return choice


class AssistantTurn(_Open):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] | None = None


class Choice(_Open):
    index: int = 0
    message: AssistantTurn
    finish_reason: str | None = None
    logprobs: dict[str, Any] | None = None


class ChatResponse(_Open):
    """What a well-formed upstream answers (``id``/``usage`` are optional: some servers omit them)."""
    choices: list[Choice] = Field(min_length=1)


def validation_error(e: ValidationError, what: str, status: int = 400, code: str = "invalid_request") -> APIError:
    """The first pydantic error as one readable line naming the field (``messages.2.role``)."""
    err = e.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "body"
    return APIError(status, f"{what}: {where}: {err['msg']}", code=code, param=where)
