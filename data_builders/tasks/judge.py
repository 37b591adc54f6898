"""An LLM judge for free-form answers, through any OpenAI-compatible chat-completions endpoint.

    judge = Judge("http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-7B-Instruct")
    judge.judge("What is the capital of France?", "It's Paris.", "Paris")   # Verdict(correct=True, ...)

The prompt is the rubric, a ``str.format`` template over ``{instruction}``, ``{answer}`` and ``{gold}`` (literal
braces doubled), sent as one user message at temperature 0. It asks for a JSON object
``{"correct": true|false, "reason": "..."}``.

Reading the reply, in order: a ``<think>...</think>`` block is dropped (reasoning models put one in the content);
the first JSON object holding ``"correct"`` (bare, inside prose or inside a code fence) is the verdict; else a reply
whose first word is yes/true/correct or no/false/incorrect. Anything else is asked again, up to ``max_retries``
more times, then :class:`JudgeError` carries the raw reply. ``"correct"`` must be a boolean or the string
``"true"``/``"false"``/``"yes"``/``"no"``: a verdict is never guessed.

JSON mode (``response_format={"type": "json_object"}``) is asked for first, since it stops the model from
wrapping the object in prose. A server that rejects the field (HTTP 400/422, as some do, and as OpenAI does for a
rubric that does not say "JSON") is asked again without it, and this judge does not send it again.

Transport: the ``openai`` client's own retries (``max_retries``, exponential backoff, ``Retry-After`` honoured) cover
connection errors, timeouts, 408/409/429 and 5xx; ``timeout_s`` bounds each request. When they are spent the judge
raises :class:`JudgeError` ("judge at <base_url> (model <model>) is unreachable after N tries: ..."): a judge that
is down must stop an evaluation, not score every answer False. Other refusals (401, 404 for an unknown model)
raise :class:`JudgeError` at once.

Cache: a verdict is stored as one small JSON file under ``cache_dir``, named by the sha256 of (model, rubric,
instruction, answer, gold) and written atomically (temp file + ``os.replace``), so concurrent runs never read half
a file. A hit makes no request: re-scoring a run, or a second run over the same answers, costs nothing.
``cache_dir=None`` turns the cache off.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import string
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_CACHE_DIR = "~/.cache/toolwise/judge"
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
RUBRIC_FIELDS = ("instruction", "answer", "gold")

DEFAULT_RUBRIC = """You are grading an AI assistant's answer to a task against the reference answer.

Task:
{instruction}

Reference answer:
{gold}

Assistant's response:
{answer}

Is the assistant's final answer correct? It is correct if it states the same answer as the reference, allowing
for different wording, formatting, units written out, or equivalent numeric forms. It is incorrect if it gives a
different answer, misses part of the reference, adds a conflicting answer, hedges between several answers, or
gives no answer. Judge only the final answer, not the reasoning.

Reply with only a JSON object: {{"correct": true or false, "reason": "<one short sentence>"}}"""

# Bumped when the fixed parts of the request or of reading the reply change, so that old cached verdicts are not
# reused for a different question.
_CACHE_VERSION = 1
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_YES = frozenset({"yes", "true", "correct"})
_NO = frozenset({"no", "false", "incorrect"})
_RAW_IN_ERROR = 2000   # characters of a raw reply quoted in an error message (the whole reply is on .raw)


class JudgeError(RuntimeError):
    """The judge gave no verdict: unreachable, refused the request, or replied with nothing readable.
    ``raw`` holds the last reply when there was one."""

    def __init__(self, message: str, raw: str | None = None):
        super().__init__(message)
        self.raw = raw


@dataclass(frozen=True)
class Verdict:
    correct: bool
    reason: str
    cached: bool = False


def rubric_fields(rubric: str) -> set[str]:
    """The placeholders a rubric uses; ValueError names an unknown one or a malformed template."""
    if not isinstance(rubric, str) or not rubric.strip():
        raise ValueError("the rubric must be a non-empty string")
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(rubric) if name is not None}
    except ValueError as e:   # a lone "{" or "}": literal braces must be doubled
        raise ValueError(f"the rubric is not a valid str.format template ({e}); write literal braces as "
                         "{{ and }}") from e
    unknown = sorted(n for n in names if n not in RUBRIC_FIELDS)
    if unknown:
        raise ValueError(f"the rubric uses unknown placeholder(s) {unknown}; allowed: "
                         f"{', '.join('{' + f + '}' for f in RUBRIC_FIELDS)} (literal braces are doubled)")
    return names


def parse_verdict(text: str) -> tuple[bool, str] | None:
    """(correct, reason) from a judge's reply, or None when it holds no verdict (see the module docstring)."""
    if not isinstance(text, str):
        return None
    text = _THINK.sub("", text).strip()
    decoder = json.JSONDecoder()
    pos = text.find("{")
    while pos >= 0:
        try:
            obj, _ = decoder.raw_decode(text, pos)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and "correct" in obj:
            correct = _as_bool(obj["correct"])
            if correct is None:
                return None   # an object that answers, but not with a boolean: ask again rather than guess
            reason = obj.get("reason", "")
            return correct, reason if isinstance(reason, str) else json.dumps(reason)
        pos = text.find("{", pos + 1)
    words = text.split(None, 1)
    if words:
        first = words[0].strip("*_`\"'.,:;!()[]").lower()
        if first in _YES or first in _NO:
            return first in _YES, text
    return None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("true", "yes"):
            return True
        if v in ("false", "no"):
            return False
    return None


class Judge:
    """Scores (instruction, answer, gold) with a model behind an OpenAI-compatible endpoint; see the module
    docstring. Thread-safe: the client is, and the cache writes are atomic."""

    def __init__(self, base_url: str, model: str, rubric: str = DEFAULT_RUBRIC, api_key: str | None = None, *,
                 api_key_env: str = DEFAULT_API_KEY_ENV, cache_dir: str | os.PathLike | None = DEFAULT_CACHE_DIR,
                 timeout_s: float = 60, max_retries: int = 3, client: Any = None):
        if not isinstance(base_url, str) or not base_url:
            raise ValueError("Judge: base_url must be a non-empty string")
        if not isinstance(model, str) or not model:
            raise ValueError("Judge: model must be a non-empty string")
        self.rubric_fields = rubric_fields(rubric)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"Judge: max_retries must be a non-negative integer, got {max_retries!r}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ValueError(f"Judge: timeout_s must be a positive number, got {timeout_s!r}")
        self.base_url, self.model, self.rubric = base_url, model, rubric
        self.timeout_s, self.max_retries = float(timeout_s), max_retries
        # why "EMPTY": local servers (vLLM, llama.cpp) need no key, but the client refuses to start without one.
        self._api_key = api_key if api_key is not None else (os.environ.get(api_key_env) or "EMPTY")
        self.cache_dir = None if cache_dir is None else Path(cache_dir).expanduser()
        self._client = client
        self._json_mode = True   # dropped for good once the server rejects response_format

    # ---------------------------------------------------------------- public

    @property
    def needs_gold(self) -> bool:
        return "gold" in self.rubric_fields

    def judge(self, instruction: str, answer: str, gold: str | None) -> Verdict:
        if gold is None and self.needs_gold:
            raise ValueError("the judge's rubric uses {gold} but the task has no gold answer")
        key = self.cache_key(instruction, answer, gold)
        hit = self._cache_get(key)
        if hit is not None:
            return hit
        prompt = self.rubric.format(instruction=instruction, answer=answer, gold="" if gold is None else gold)
        raw = None
        for _ in range(self.max_retries + 1):
            raw = self._complete(prompt)
            parsed = parse_verdict(raw)
            if parsed is not None:
                verdict = Verdict(correct=parsed[0], reason=parsed[1], cached=False)
                self._cache_put(key, verdict)
                return verdict
        shown = raw if raw is None or len(raw) <= _RAW_IN_ERROR else raw[:_RAW_IN_ERROR] + "..."
        raise JudgeError(f"judge at {self.base_url} (model {self.model}) gave no readable verdict in "
                         f"{self.max_retries + 1} tries; last reply: {shown!r}", raw=raw)

    __call__ = judge

    def cache_key(self, instruction: str, answer: str, gold: str | None) -> str:
        payload = json.dumps([_CACHE_VERSION, self.model, self.rubric, instruction, answer, gold],
                             ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    # ---------------------------------------------------------------- transport

    @property
    def client(self):
        if self._client is None:
            from openai import OpenAI   # why here: the client is an optional extra, and a cache hit needs none

            self._client = OpenAI(base_url=self.base_url, api_key=self._api_key, timeout=self.timeout_s,
                                  max_retries=self.max_retries)
        return self._client

    def _complete(self, prompt: str) -> str:
        import openai

        kwargs: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                                  "temperature": 0}
        while True:
            json_mode = self._json_mode
            if json_mode:
                kwargs["response_format"] = {"type": "json_object"}
            else:
                kwargs.pop("response_format", None)
            try:
                response = self.client.chat.completions.create(**kwargs)
            except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError) as e:
                # The client has already retried these max_retries times with backoff.
                raise JudgeError(f"judge at {self.base_url} (model {self.model}) is unreachable after "
                                 f"{self.max_retries + 1} tries: {type(e).__name__}: {e}") from e
            except openai.APIStatusError as e:
                if json_mode and e.status_code in (400, 422):
                    self._json_mode = False   # a server without JSON mode: plain text, parsed leniently
                    continue
                if e.status_code in (408, 409) or e.status_code >= 500:   # retried by the client, then given up
                    raise JudgeError(f"judge at {self.base_url} (model {self.model}) is unreachable after "
                                     f"{self.max_retries + 1} tries: HTTP {e.status_code}: {e}") from e
                raise JudgeError(f"judge at {self.base_url} (model {self.model}) refused the request: "
                                 f"HTTP {e.status_code}: {e}") from e
            return _content(response)

    # ---------------------------------------------------------------- cache

    def _cache_path(self, key: str) -> Path | None:
        # Two-character shards keep a directory small after hundreds of thousands of verdicts.
        return None if self.cache_dir is None else self.cache_dir / key[:2] / f"{key}.json"

    def _cache_get(self, key: str) -> Verdict | None:
        path = self._cache_path(key)
        if path is None:
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):   # absent, or not ours: a miss, overwritten by the next verdict
            return None
        if not (isinstance(data, dict) and isinstance(data.get("correct"), bool)):
            return None
        return Verdict(correct=data["correct"], reason=str(data.get("reason", "")), cached=True)

    def _cache_put(self, key: str, verdict: Verdict) -> None:
        path = self._cache_path(key)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"correct": verdict.correct, "reason": verdict.reason, "model": self.model}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:8]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(record, f, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


def _content(response: Any) -> str:
    """The reply's text; "" for a reply without one (counted as unreadable, so asked again)."""
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""
