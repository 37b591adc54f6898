"""The agent loop: When2Tool's protocol (docs/guide.md#when2tool-the-protocol-state-machine) with toolwise's
three hook points, run for many tasks at once.

Episodes advance in lock-step rounds: every round, each episode still running contributes one prompt
and all of them are generated as one batch; finished episodes are replaced from the queue so the batch
stays full (``max_in_flight``). Tools run through the environment's ``call`` pipeline, which never
raises, and model-written code never runs in this process.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .. import progress
from ..backends.base import Backend, SamplingParams
from ..backends.grammar import CallConstraint
from ..environments import make_environment
from ..environments.base import serialize
from ..protocol import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from ..tasks.schema import Task
from ..tasks.scorers import score_task
from ..tasks.scoring import extract_boxed, token_cost
from . import prompts as P
from .hooks import EpisodeView, Hooks, PromptState
from .parsing import has_boxed, parse_tool_call, reasoning_present
from .trajectory import Call, Decision, Trajectory, Turn, error_kind, executed_calls

CONTEXT_EXCEEDED = "[CONTEXT_LENGTH_EXCEEDED]"
TOOL_ACCESS = ("real", "noop", "hidden")


@dataclass
class AgentConfig:
    mode: str = "default"              # force | default | necessary | sparse | no_tool | hard_no_tool | cot
    reasoning: bool = False            # Reason-then-Act
    call_format: str = "auto"          # xml | native | auto (by the model id: prompts.auto_call_format)
    max_rounds: int = 10
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    max_in_flight: int = 32
    max_continues: int = 1             # on_answer "continue" decisions allowed per episode
    verify_rounds: int = 2             # extra rounds granted by each continue
    max_context: int | None = None     # default: min(model positions, 32768)
    logprobs: bool = True              # keep per-token log-probs of generated text (G-STEP features)
    reuse_kv: bool = True              # keep each episode's KV cache between turns (prefill only new tokens)
    keep_token_ids: bool = False       # store each turn's generated token ids (RL rollouts train on exact tokens)
    # Interventions of the tool-use-tax paper's factorized framework (trainers/evaluate/factorized.py); the defaults change nothing.
    tool_access: str = "real"          # real | noop (calls run the protocol, return P.NOOP_CALL_RESULT) |
                                       # hidden (no schemas rendered, calls rejected with P.TOOLS_UNAVAILABLE)
    max_tool_calls: int | None = None  # executed (or no-op) calls allowed per episode; more are rejected
    reasoning_check: bool = True       # False: free text allowed before calls and answers (reasoning checks off)
    # Once a call opens, decode it under the episode's tool schemas (backends/grammar.py; needs xgrammar). It
    # changes what a benchmark measures, so it is part of the evaluator's cache key and report like any setting.
    constrained_calls: bool = False

    def __post_init__(self):
        self.mode = P.canonical_mode(self.mode)
        if self.call_format not in P.CALL_FORMATS + ("auto",):
            raise ValueError(f"call_format must be one of {P.CALL_FORMATS + ('auto',)}, got {self.call_format!r}")
        if self.tool_access not in TOOL_ACCESS:
            raise ValueError(f"tool_access must be one of {TOOL_ACCESS}, got {self.tool_access!r}")
        if self.max_tool_calls is not None and (isinstance(self.max_tool_calls, bool) or
                                                not isinstance(self.max_tool_calls, int) or self.max_tool_calls < 0):
            raise ValueError(f"max_tool_calls must be null or an integer >= 0, got {self.max_tool_calls!r}")
        # A float (``max_new_tokens=1e9`` on a command line) or a count < 1 is a typo, never a budget: refuse it
        # here, before any model loads, rather than run episodes that cannot generate.
        for name in ("max_new_tokens", "max_rounds", "max_in_flight", "max_context"):
            value = getattr(self, name)
            if name == "max_context" and value is None:    # None: the model's own limit
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    @property
    def tools_hidden(self) -> bool:
        """No tool schemas in the prompt and every call rejected: mode cot, or tool_access hidden."""
        return self.mode == P.COT_MODE or self.tool_access == "hidden"


@dataclass
class _Episode:
    task: Task
    index: int
    env: object
    tools: list[dict]
    messages: list[dict]
    rounds_budget: int
    round: int = 0
    after_tool: bool = False
    prefilled: bool = False
    prefill_text: str = ""
    uid: int = 0                            # key of this episode's KV cache in the backend
    verifying: bool = False
    continues: int = 0
    pending_answer: str | None = None      # last answer sent back for verification
    final_response: str = ""
    ended: str | None = None
    turns: list[Turn] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    executed: set = field(default_factory=set)
    counts: dict = field(default_factory=lambda: {"tool_calls": 0, "skipped_calls": 0, "rejected_calls": 0,
                                                  "malformed_calls": 0, "format_errors": 0})
    generation_tokens: int = 0              # When2Tool token_cost terms (docs/guide.md#when2tool-scoring)
    appended_tokens: int = 0

    def view(self, mode: str) -> EpisodeView:
        return EpisodeView(self.task, self.messages, self.turns, self.calls, self.round, mode, tools=self.tools)


def expected_generations(taken: list[int], active: list[tuple[int, int]], queued: int, rounds: int) -> float:
    """How many generations a run will have taken when it ends (what its progress bar's total counts): the ended
    episodes' ``taken``; for each episode still going (``active``: its generations so far and the rounds it may
    take now, which a continue extends) or not started (``queued``, ``rounds`` each) the expectation under one stop
    rate per round — the share of the rounds seen so far after which an episode stopped — capped by the rounds it
    has. Before any episode stopped, a stop equally likely in each round it has left."""
    seen = sum(taken) + sum(r for r, _ in active)
    rate = len(taken) / seen if seen else 0.0

    def more(left: int) -> float:       # generations still to come, the stopping one included
        left = max(left, 1)
        return min(1 / rate, left) if rate > 0 else (left + 1) / 2
    return sum(taken) + sum(r + more(cap - r) for r, cap in active) + queued * more(rounds)


class Agent:
    def __init__(self, backend: Backend, config: AgentConfig | None = None, hooks: Hooks | None = None):
        self.backend = backend
        self.cfg = config or AgentConfig()
        self.hooks = hooks or Hooks()
        # When2Tool's harness raises Python's int->str limit to 10,000 digits; tool results
        # of 4,301..5,000 digits are valid payloads only under that limit.
        if sys.get_int_max_str_digits() < 10_000:
            sys.set_int_max_str_digits(10_000)
        fmt = self.cfg.call_format
        self.call_format = P.auto_call_format(backend.model_id) if fmt == "auto" else fmt
        positions = getattr(getattr(backend, "config", None), "max_position_embeddings", 32768) or 32768
        self.max_context = self.cfg.max_context or min(int(positions), 32768)
        # Every round needs prompt + max_new_tokens <= max_context; a budget that fills the context would end every
        # episode at round 0 with no generation, which downstream reads as a wrong answer (a build labels it
        # "tool needed"). Refuse it here: this runs on the driver too (``Agent(executor.info)``), before any shard.
        if self.cfg.max_new_tokens >= self.max_context:
            raise ValueError(f"max_new_tokens={self.cfg.max_new_tokens} leaves no room for a prompt: the context holds "
                             f"{self.max_context} tokens (model {backend.model_id}, max_position_embeddings="
                             f"{positions}, max_context={self.cfg.max_context}); lower max_new_tokens well below "
                             f"{self.max_context} (a prompt with its tool schemas takes hundreds of tokens)")
        self._overhead: dict[tuple, int] = {}   # tokens of an episode's first prompt without its instruction
        self._uid = 0

    # ------------------------------------------------------------------ public
    def run(self, tasks: Sequence[Task], on_done: Callable[[Trajectory], None] | None = None,
            on_round: Callable[[int, int], None] | None = None) -> list[Trajectory]:
        """Run every task to completion; returns trajectories in task order. ``on_done`` gets each
        finished one; ``on_round(step, episodes_in_flight)`` is called after every batched round."""
        # progress (data_builders.progress): a round is one generation of up to max_new_tokens; planned at first
        # for max_rounds per episode, revised after each round (expected_generations)
        with progress.budget(len(tasks) * self.cfg.max_rounds * self.cfg.max_new_tokens) as plan:
            return self._run(tasks, on_done, on_round, plan)

    def _run(self, tasks: Sequence[Task], on_done: Callable[[Trajectory], None] | None,
             on_round: Callable[[int, int], None] | None, plan: progress.Plan) -> list[Trajectory]:
        queue = list(enumerate(tasks))[::-1]
        active: list[_Episode] = []
        out: list[Trajectory | None] = [None] * len(tasks)
        taken: list[int] = []       # generations of each episode that ended
        step = 0
        while queue or active:
            while queue and len(active) < self.cfg.max_in_flight:
                i, task = queue.pop()
                active.append(self._start(task, i))
            self._round(active, step)
            step += 1
            if on_round:
                on_round(step, len(active))
            still = []
            for ep in active:
                if ep.ended is None:
                    still.append(ep)
                    continue
                self.backend.release([ep.uid])
                taken.append(len(ep.turns))
                rec = self._record(ep)
                out[ep.index] = rec
                if on_done:
                    on_done(rec)
            active = still
            plan.replan(self.cfg.max_new_tokens * expected_generations(
                taken, [(len(ep.turns), ep.rounds_budget) for ep in active], len(queue), self.cfg.max_rounds))
        return out  # type: ignore[return-value]

    # ------------------------------------------------------------------ episode set-up
    def _start(self, task: Task, index: int) -> _Episode:
        env = make_environment(task.env)
        messages = P.initial_messages(task.instruction, task.env.name, self.cfg.mode, self.cfg.reasoning,
                                      self.call_format)
        self._uid += 1
        tools = [] if self.cfg.tools_hidden else env.tool_specs()
        self._check_room(task, tools)
        return _Episode(task=task, index=index, env=env, tools=tools, messages=messages,
                        rounds_budget=self.cfg.max_rounds, uid=self._uid)

    def check_tasks(self, tasks: Sequence[Task]) -> None:
        """Raise the error :meth:`run` would raise at its first round if the settings leave no room to generate
        for one of these tasks' environments (callers check before they write anything). An engine's identity
        alone (``EngineInfo``, a Ray worker's engine seen from the driver) cannot render prompts: its agents
        check in their shard, before they generate."""
        if not callable(getattr(self.backend, "render", None)):
            return
        seen = set()
        for task in tasks:
            if task.env.name not in seen:
                seen.add(task.env.name)
                self._start(task, -1)

    def initial_prompt(self, task: Task) -> str:
        """The first prompt of an episode on ``task`` exactly as the loop renders it (the probe reads this)."""
        return self._render(self._start(task, -1))

    def renderer(self, task: Task) -> Callable[[list[dict]], str]:
        """Renders any message list of an episode on ``task`` exactly as the loop does (the episode's tools,
        the chat template, the generation prompt): RL rollouts rebuild each turn's prompt with it."""
        tools = self._start(task, -1).tools
        return lambda messages: self.backend.render(P.template_messages(messages), tools)

    def _render(self, ep: _Episode) -> str:
        return self.backend.render(P.template_messages(ep.messages), ep.tools)

    def _check_room(self, task: Task, tools: list[dict]) -> None:
        """Refuse settings under which no episode of this environment could generate: its first prompt with an
        empty instruction (system prompt, tool schemas, template) plus ``max_new_tokens`` already fills the
        context. Measured once per environment and tool set; a task whose own instruction is too long is not a
        setting error and ends ``context_length`` like in the benchmark."""
        key = (task.env.name, serialize(tools))
        if key not in self._overhead:
            empty = P.initial_messages("", task.env.name, self.cfg.mode, self.cfg.reasoning, self.call_format)
            self._overhead[key] = self.backend.count_tokens(self.backend.render(P.template_messages(empty), tools))
        overhead = self._overhead[key]
        if overhead + self.cfg.max_new_tokens >= self.max_context:
            raise ValueError(f"max_new_tokens={self.cfg.max_new_tokens} leaves no room to generate: a {task.env.name} "
                             f"prompt in mode {self.cfg.mode} takes {overhead} tokens before its instruction, and the "
                             f"context holds {self.max_context} (model {self.backend.model_id}); set max_new_tokens "
                             f"below {self.max_context - overhead}")

    def fits(self, prompt: str) -> bool:
        """Whether ``prompt`` leaves ``max_new_tokens`` of room in the context. A prompt too long in characters
        to fit is refused without tokenizing it (a 10 MB instruction costs ~13 s to tokenize): no token of the
        vocabulary covers more than the backend's ``max_token_chars`` characters, so such a prompt has at least
        ``len(prompt) / max_token_chars`` tokens (the bound is halved again for normalizers that merge characters)."""
        budget = self.max_context - self.cfg.max_new_tokens
        longest = getattr(self.backend, "max_token_chars", None)
        if longest and len(prompt) > 2 * longest * budget:
            return False
        return self.backend.count_tokens(prompt) <= budget

    # ------------------------------------------------------------------ one round for all active episodes
    def _round(self, active: list[_Episode], step: int) -> None:
        cfg = self.cfg
        params = SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                                # constrained: the grammar ends the turn after its call (backends/grammar.py)
                                stop=() if cfg.constrained_calls else (TOOL_CALL_CLOSE,),
                                seed=cfg.seed + step if cfg.temperature > 0 else None)
        probe_eps, plain_eps, probe_prompts, plain_prompts = [], [], [], []
        for ep in active:
            prompt = self._render(ep)
            if not self.fits(prompt):
                ep.final_response, ep.ended = CONTEXT_EXCEEDED, "context_length"
                continue
            if ep.round == 0 and self.hooks.hidden_layers is not None:
                probe_eps.append(ep); probe_prompts.append(prompt)
            else:
                prefill = self._pre_generation(ep, prompt, None) if ep.round == 0 else ""
                plain_eps.append(ep); plain_prompts.append(prompt + prefill)
        if probe_eps:
            t0 = time.perf_counter()
            state = self.backend.prefill(probe_prompts, self.hooks.hidden_layers)
            full = [p + self._pre_generation(ep, p, state.hidden[k], state.layers)
                    for k, (ep, p) in enumerate(zip(probe_eps, probe_prompts))]
            gens = self.backend.generate(full, params, prefill_state=state, return_logprobs=cfg.logprobs,
                                         cache_keys=self._keys(probe_eps), **self._constraints(probe_eps))
            self._apply(probe_eps, gens, time.perf_counter() - t0)
        if plain_eps:
            t0 = time.perf_counter()
            gens = self.backend.generate(plain_prompts, params, return_logprobs=cfg.logprobs,
                                         cache_keys=self._keys(plain_eps), **self._constraints(plain_eps))
            self._apply(plain_eps, gens, time.perf_counter() - t0)

    def _keys(self, eps: list[_Episode]) -> list[int] | None:
        return [ep.uid for ep in eps] if self.cfg.reuse_kv else None

    def _constraints(self, eps: list[_Episode]) -> dict:
        """``generate``'s ``constraints`` argument when calls are constrained (nothing otherwise, so backends that
        predate it still work): each episode's tools, continuing a call its round-0 prefill opened."""
        if not self.cfg.constrained_calls:
            return {}
        return {"constraints": [CallConstraint.after(ep.tools, self.call_format, ep.prefill_text if ep.round == 0
                                                     else "") if ep.tools else None for ep in eps]}

    def _pre_generation(self, ep: _Episode, prompt: str, hidden, layers=None) -> str:
        prefill = self.hooks.pre_generation(ep.task, PromptState(prompt, list(ep.messages), hidden, layers))
        ep.decisions.append(Decision(hook="pre_generation", round=0, decision=prefill))
        ep.prefill_text = prefill or ""
        ep.prefilled = bool(prefill)
        return ep.prefill_text

    def _apply(self, eps: list[_Episode], gens, wall_s: float) -> None:
        for ep, gen in zip(eps, gens):
            prefill_text = ep.prefill_text if ep.round == 0 else ""
            raw = prefill_text + gen.text
            prev_ctx = ep.turns[-1].context_len + ep.turns[-1].decode_tokens if ep.turns else 0
            lps = gen.logprobs or []
            keep = self.cfg.keep_token_ids
            ep.turns.append(Turn(
                round=ep.round, text=raw, prefill_text=prefill_text,
                prefill_tokens=gen.prompt_tokens,                        # whole context, re-prefilled (full eviction)
                new_tokens=max(gen.prompt_tokens - prev_ctx, 0),         # context not seen last turn (cache-reuse PTE)
                cached_tokens=gen.cached_tokens,                         # prompt tokens the engine did not recompute
                context_len=gen.prompt_tokens, decode_tokens=gen.decode_tokens,
                finish_reason=gen.finish_reason, wall_s=round(wall_s, 4),
                logprobs=[round(x, 4) for x in lps] if self.cfg.logprobs else None,
                token_ids=list(gen.token_ids) if keep else None, raw_logprobs=list(lps) if keep else None,
            ))
            ep.generation_tokens += self.backend.count_tokens(raw)
            self._step(ep, raw)
            ep.round += 1
            if ep.ended is None and ep.round >= ep.rounds_budget:
                ep.ended = "max_rounds"
                # A verification round that never re-answered keeps the answer it was verifying.
                ep.final_response = ep.pending_answer or ""

    # ------------------------------- the state machine (docs/guide.md#when2tool-the-protocol-state-machine)
    def _say(self, ep: _Episode, raw: str, *replies: dict) -> None:
        ep.messages.append({"role": "assistant", "content": raw})
        for r in replies:
            ep.messages.append(r)
            ep.appended_tokens += self.backend.count_tokens(r["content"])

    def _user(self, text: str) -> dict:
        return {"role": "user", "content": text}

    def _step(self, ep: _Episode, raw: str) -> None:
        cfg, c = self.cfg, ep.counts
        # As in the benchmark, prefilled episodes skip the reasoning checks; so do cot (reasoning is its point)
        # and reasoning_check=False
        lenient = ep.prefilled or ep.verifying or not cfg.reasoning_check or cfg.mode == P.COT_MODE
        call = parse_tool_call(raw)
        if call is not None:
            ep.turns[-1].kind = "call"
            rec = {"round": ep.round, "name": call.name, "args": call.arguments}
            if cfg.mode == "hard_no_tool" or cfg.tools_hidden:
                c["rejected_calls"] += 1
                reason = cfg.mode if cfg.mode in ("hard_no_tool", P.COT_MODE) else "tools_hidden"
                ep.calls.append(Call(**rec, status="rejected", reason=reason))
                return self._say(ep, raw, self._user(P.TOOLS_UNAVAILABLE))
            if not ep.after_tool and not lenient:
                has_reason = reasoning_present(raw, kind="call")
                if cfg.reasoning and not has_reason:
                    return self._reject_call(ep, raw, rec, P.MISSING_REASONING_CALL)
                if not cfg.reasoning and has_reason:
                    return self._reject_call(ep, raw, rec, P.NO_REASONING_CALL)
            signature = serialize({"name": call.name, "arguments": call.arguments})
            if ep.verifying and signature in ep.executed:
                # Verification that repeats an executed call makes no progress: keep the verified answer.
                ep.decisions.append(Decision(hook="on_answer", round=ep.round, decision="stop_duplicate_call"))
                ep.messages.append({"role": "assistant", "content": raw})
                ep.final_response, ep.ended = ep.pending_answer or "", "duplicate_call"
                return
            if cfg.max_tool_calls is not None and c["tool_calls"] >= cfg.max_tool_calls:
                c["rejected_calls"] += 1
                ep.calls.append(Call(**rec, status="rejected", reason="max_tool_calls"))
                return self._say(ep, raw, self._user(P.TOOL_BUDGET_USED))
            decision = self.hooks.pre_call(ep.view(cfg.mode), call)
            ep.decisions.append(Decision(hook="pre_call", round=ep.round, call=call.name, decision=decision))
            if decision == "skip":
                payload, status = dict(P.SKIPPED_CALL_RESULT), "skipped"
                c["skipped_calls"] += 1
            else:
                if cfg.tool_access == "noop":
                    payload, status = dict(P.NOOP_CALL_RESULT), "noop"
                else:
                    payload, status = ep.env.call(call.name, call.arguments), "executed"
                c["tool_calls"] += 1
                ep.executed.add(signature)
            ep.calls.append(Call(**rec, status=status, result=payload, ok=payload.get("success") is not False,
                                 error_kind=error_kind(payload)))
            ep.after_tool = True
            return self._say(ep, raw, P.tool_response_message(serialize(payload), self.call_format))

        if has_boxed(raw):
            ep.turns[-1].kind = "answer"
            if not (ep.after_tool or lenient):
                has_reason = reasoning_present(raw, kind="answer")
                if cfg.reasoning and not has_reason:
                    return self._reject_answer(ep, raw, P.MISSING_REASONING_ANSWER)
                if not cfg.reasoning and has_reason:
                    return self._reject_answer(ep, raw, P.NO_REASONING_ANSWER)
            return self._answer(ep, raw)

        ep.turns[-1].kind = "content"
        if TOOL_CALL_OPEN in raw or '"name"' in raw:
            c["malformed_calls"] += 1     # an attempted call the lenient parser could not read
        c["format_errors"] += 1
        ep.after_tool = False
        self._say(ep, raw, self._user(P.continue_prompt(cfg.mode, cfg.reasoning, cfg.reasoning_check)))

    def _reject_call(self, ep: _Episode, raw: str, rec: dict, message: str) -> None:
        ep.counts["rejected_calls"] += 1
        ep.counts["format_errors"] += 1
        ep.calls.append(Call(**rec, status="rejected", reason=message))
        self._say(ep, raw, self._user(message))

    def _reject_answer(self, ep: _Episode, raw: str, message: str) -> None:
        ep.counts["format_errors"] += 1
        self._say(ep, raw, self._user(message))

    def _answer(self, ep: _Episode, raw: str) -> None:
        if ep.verifying and extract_boxed(raw) == extract_boxed(ep.pending_answer or ""):
            ep.decisions.append(Decision(hook="on_answer", round=ep.round, decision="stop_no_progress"))
        elif ep.continues < self.cfg.max_continues:
            decision = self.hooks.on_answer(ep.view(self.cfg.mode), raw)
            ep.decisions.append(Decision(hook="on_answer", round=ep.round, decision=decision))
            if decision == "continue":
                ep.continues += 1
                ep.verifying, ep.pending_answer = True, raw
                ep.rounds_budget += self.cfg.verify_rounds
                ep.after_tool = False
                return self._say(ep, raw, self._user(P.VERIFY_PROMPT))
        ep.messages.append({"role": "assistant", "content": raw})
        ep.final_response, ep.ended = raw, "answer"

    # ------------------------------------------------------------------ output record
    def _record(self, ep: _Episode) -> Trajectory:
        t, cfg = ep.task, self.cfg
        return Trajectory(
            task_id=t.id, env=t.env.name, category=t.category, difficulty=t.difficulty, split=t.split,
            expected_steps=t.expected_steps,
            mode=cfg.mode, reasoning=cfg.reasoning, call_format=self.call_format,
            policy=self.backend.fingerprint,
            decoding={"temperature": cfg.temperature, "top_p": cfg.top_p, "max_new_tokens": cfg.max_new_tokens,
                      "seed": cfg.seed, "max_rounds": cfg.max_rounds,
                      **({"constrained_calls": True} if cfg.constrained_calls else {})},
            messages=ep.messages, turns=ep.turns, calls=ep.calls, decisions=ep.decisions,
            final_response=ep.final_response, answer=extract_boxed(ep.final_response),
            gold=t.answer, correct=score_task(t, ep.final_response, calls=executed_calls(ep.calls)),
            rounds=len(ep.turns), ended=ep.ended, **ep.counts,
            generation_tokens=ep.generation_tokens, appended_prompt_tokens=ep.appended_tokens,
            token_cost=token_cost(ep.generation_tokens, ep.appended_tokens),
            # The factorized-framework settings that differ from the defaults (none: the record is unchanged).
            tool_access=cfg.tool_access if cfg.tool_access != "real" else None,
            max_tool_calls=cfg.max_tool_calls,
            reasoning_check=False if not cfg.reasoning_check else None,
        ).validate()     # a loop bug fails here, at its episode, not when the file is read back
