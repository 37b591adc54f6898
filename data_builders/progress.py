"""Progress of the phases that generate: a bar in generated tokens whose total is what the work is expected to
generate, so that it advances while a batch decodes and its ETA means something.

A batched rollout finishes its episodes together, so a bar counting finished tasks stands still for most of a
shard (a 64-task build showed ``1/64 [04:01<4:13:28]``: a four-hour ETA for a nine-minute job). Generated tokens
advance steadily — the time of a batched decode grows with the rows still decoding, as their count does — but
how many a task will generate is unknown in advance. What is known is a *budget*: a generation may write up to
``max_new_tokens`` per row, an episode has so many rounds. So the work is counted in budget tokens, of two kinds:
*generated* (a token decoded) and *credited* (budget known never to be used: the rest of a row that stopped, a
generation's unused budget when it returns). The bar shows the generated tokens; its total adds the budget still
open times the share of their budget the generations that ended used, so the ETA extrapolates the decoding rate
over the work the budget says is left (``tests/data_builders/test_progress.py`` checks a batched build's ETA).

Who counts: the code that generates. A backend's ``generate`` is a :func:`budget` of rows × ``max_new_tokens``
(the HF backend reports each decode segment; the others when the call returns); the agent's ``run`` is a
:func:`budget` of ``max_rounds`` generations per episode, revised after each round by how its episodes stop;
inside it, a generation plans nothing more. A driver gets running totals through :func:`metering`; with no meter
set (a server, a test), every call here is a no-op.
"""
from __future__ import annotations

import functools
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterator, NamedTuple

from tqdm.auto import tqdm


class Work(NamedTuple):
    """Running totals of a metered block, in budget tokens."""
    planned: int = 0            # the budget: what the work may take, as far as it is planned
    generated: int = 0          # tokens decoded
    credited: int = 0           # budget known never to be used
    # of the batches that finished (a backend call, or each batch of one): tokens decoded and their budget. The
    # share used is learned from whole batches: mid-batch, the rows still decoding have used all they spent and
    # the rows that stopped are the short ones, so neither is a fair sample
    closed_generated: int = 0
    closed_budget: int = 0
    running: int = 0            # budget not yet spent of the backend calls under way (their rows still to end)

    @property
    def spent(self) -> int:
        return self.generated + self.credited


@dataclass
class _Meter:
    report: Callable[[Work], None]
    work: Work = Work()
    scopes: list = field(default_factory=list)

    def add(self, planned: int = 0, generated: int = 0, credited: int = 0, closed_generated: int = 0,
            closed_budget: int = 0) -> None:
        delta = (planned, generated, credited, closed_generated, closed_budget)
        if any(delta):      # planned < 0: a budget revised down
            running = sum(p.planned - p.spent for p in self.scopes if p.call)
            self.work = Work(*(a + b for a, b in zip(self.work, delta)), running)
            self.report(self.work)


@dataclass
class Plan:
    """An open :func:`budget`: what it planned, spent and closed so far; :meth:`replan` revises what it expects."""
    planned: int
    spent: int = 0
    generated: int = 0
    closed_generated: int = 0
    closed_budget: int = 0
    meter: _Meter | None = None
    call: bool = False          # a backend call (a generation), not a plan of several

    def replan(self, tokens: float) -> None:
        """The work is now expected to take ``tokens`` in all (never less than already spent); the bar's total
        follows when this is the outermost budget."""
        if self.meter is None:
            return
        new = max(int(round(tokens)), self.spent)
        if self.meter.scopes and self.meter.scopes[0] is self:
            self.meter.add(planned=new - self.planned)
        self.planned = new


_METER: ContextVar[_Meter | None] = ContextVar("toolwise_progress_meter", default=None)


@contextmanager
def metering(report: Callable[[Work], None]) -> Iterator[None]:
    """Within this block, generation is counted and ``report`` gets the running :class:`Work` at each change."""
    token = _METER.set(_Meter(report))
    try:
        yield
    finally:
        _METER.reset(token)


@contextmanager
def budget(tokens: int, call: bool = False) -> Iterator[Plan]:
    """Work of at most ``tokens`` budget tokens: planned now (unless an enclosing budget already covers it), and
    whatever of it was not spent when the block ends is credited then (it will never be used). Yields the
    :class:`Plan`, which the work may revise as it learns how much it will take. ``call``: the block is one backend
    call (a generation whose rows decode together)."""
    meter = _METER.get()
    if meter is None:
        yield Plan(int(tokens))
        return
    plan = Plan(max(int(tokens), 0), meter=meter, call=call)
    if not meter.scopes:
        meter.add(planned=plan.planned)
    meter.scopes.append(plan)
    try:
        yield plan
    finally:
        credit(plan.planned - plan.spent)       # while on the stack: the enclosing budgets get it too
        close(plan.generated - plan.closed_generated, plan.planned - plan.closed_budget)
        meter.scopes.remove(plan)


def generated(tokens: int) -> None:
    """``tokens`` decoded (the enclosing budgets spent by as much)."""
    _spend(int(tokens), 0)


def credit(tokens: int) -> None:
    """``tokens`` of the enclosing budgets that will never be used (a row that stopped, an unused generation)."""
    _spend(0, int(tokens))


def close(generated_: int, budget_: int) -> None:
    """Work ended (a budget's block), having decoded ``generated_`` tokens of its ``budget_``: what the share of
    budget the work uses is learned from."""
    meter = _METER.get()
    if meter is None or budget_ <= 0:
        return
    for plan in meter.scopes:
        plan.closed_generated += generated_
        plan.closed_budget += budget_
    meter.add(closed_generated=generated_, closed_budget=budget_)


def _spend(generated_: int, credited: int) -> None:
    meter = _METER.get()
    tokens = generated_ + credited
    if meter is None or tokens <= 0:
        return
    for plan in meter.scopes:
        plan.spent += tokens
        plan.generated += generated_
    if not meter.scopes:        # work nobody planned: it moves the total and the count alike, closed at once
        meter.add(tokens, generated_, credited, generated_, tokens)
        return
    outer = meter.scopes[0]
    # past the outermost plan (a budget that underestimated): the total grows, so the bar never runs past it
    over = min(tokens, max(outer.spent - outer.planned, 0))
    outer.planned += over
    meter.add(over, generated_, credited)


def generation(generate: Callable) -> Callable:
    """A backend's ``generate(prompts, params, ...)`` as a :func:`budget` of rows × ``params.max_new_tokens``.
    The tokens its generations hold that the backend did not report as it decoded (vLLM's and an API's calls
    return whole) are counted as generated when the call returns, the rest of the budget is credited."""
    @functools.wraps(generate)
    def metered(self, prompts, *args, **kw):
        if _METER.get() is None:
            return generate(self, prompts, *args, **kw)
        params = args[0] if args else kw.get("params")
        with budget(len(prompts) * int(getattr(params, "max_new_tokens", 0) or 0), call=True) as plan:
            out = generate(self, prompts, *args, **kw)
            made = sum(len(getattr(g, "token_ids", None) or ()) for g in out)
            generated(min(made, plan.planned) - plan.generated)   # never past the call's own budget
            return out
    return metered


def expected_tokens(work: Work) -> float:
    """What ``work`` is expected to generate in all: what it generated, and its open budget at the share of their
    budget the batches that finished used (before one finished: the first one's, its live rows expected to stop
    halfway through the budget they have left; before anything: all of it)."""
    if work.closed_budget:
        fill = work.closed_generated / work.closed_budget
    elif work.spent + work.running:
        fill = (work.generated + work.running / 2) / (work.spent + work.running)
    else:
        fill = 1.0
    return work.generated + max(work.planned - work.spent, 0) * fill


class _TokenBar(tqdm):
    """tqdm whose rate counts from the first update that brought tokens, not from the bar's start: what comes
    before it (the engine starting, the first prompts' prefill — on CPU 10-15 % of the main job, generating
    nothing) happens once, and averaged in it made the ETA of the first rounds up to 8x the truth. Until a second
    update gives a rate, the ETA shows "?"."""

    def __init__(self, *args, **kwargs):
        self._anchor: tuple[float, float] | None = None     # (time, count) at the first update with tokens
        super().__init__(*args, **kwargs)

    def update(self, n=1):
        shown = super().update(n)
        if self._anchor is None and self.n > 0:
            self._anchor = (self._time(), self.n)
        return shown

    @property
    def format_dict(self):
        d = super().format_dict
        if self._anchor is None:
            d["rate"] = 0           # tqdm prints "?" for a zero rate
        else:
            t0, n0 = self._anchor
            dt = self._time() - t0
            d["rate"] = (self.n - n0) / dt if dt > 0 and self.n > n0 else 0
        return d


class BudgetBar:
    """The driver's bar over a map of shards (``executor.map(..., on_tick=bar.tick, on_work=bar.work)``): generated
    tokens, finished items in the postfix. ``items``: key -> the number of items (tasks) of each shard to do. The
    total: until a shard has finished, :func:`expected_tokens` of the shards that started, and the others at their
    tokens per item; then every shard at the tokens per item of the finished ones."""

    def __init__(self, desc: str, items: dict[Hashable, int], unit: str = "task", done_items: int = 0,
                 total_items: int | None = None, **tqdm_kw):
        self.items = dict(items)
        self.n_items = sum(self.items.values())
        self.done_items = done_items
        self.total_items = total_items if total_items is not None else self.n_items + done_items
        self.unit_items = unit
        self.work_of: dict[Hashable, Work] = {}
        self.ticks: dict[Hashable, int] = {}
        # smoothing=0: the rate is the average since the first tokens, not of the last few updates (segments and
        # rounds come in bursts; the average over the run is the steadier estimate)
        self.bar = _TokenBar(total=None, desc=desc, unit="tok", unit_scale=True, smoothing=0, dynamic_ncols=True,
                             **tqdm_kw)
        self._postfix()

    def tick(self, key: Hashable = None) -> None:
        """An item (a task's episode) of shard ``key`` finished."""
        self.done_items += 1
        self.ticks[key] = self.ticks.get(key, 0) + 1
        self._postfix()

    def work(self, key: Hashable, work: Work) -> None:
        """Shard ``key``'s totals so far (cumulative, so a redone shard restates rather than adds)."""
        self.work_of[key] = Work(*work)
        done = sum(w.generated for w in self.work_of.values())
        finished = [k for k in self.work_of if self.ticks.get(k, 0) >= self.items.get(k, 0) > 0]
        if finished:
            # once a shard has finished, what it generated per item is the best guess for the others (shards of a
            # map are alike); a shard already past that guess is expected to end where it is
            per_item = sum(self.work_of[k].generated for k in finished) / sum(self.items[k] for k in finished)
            total = sum(self.work_of[k].generated if k in finished else
                        max(per_item * n, self.work_of[k].generated if k in self.work_of else 0)
                        for k, n in self.items.items())
        else:
            # one share generated for every shard (a shard that just started has spent nothing to learn it from)
            expected = expected_tokens(Work(*map(sum, zip(*self.work_of.values()))))
            started = sum(self.items.get(k, 0) for k in self.work_of)
            rest = self.n_items - started
            total = expected + (expected / started * rest if started and rest > 0 else 0)
        self.bar.total = max(int(round(total)), done)
        self.bar.update(done - self.bar.n)

    def eta_s(self) -> float | None:
        """Seconds left by the bar's own estimate (what it prints), None before it has one."""
        d = self.bar.format_dict
        if not d["total"] or not d["rate"]:
            return None
        return (d["total"] - d["n"]) / d["rate"]

    def _postfix(self) -> None:
        self.bar.set_postfix_str(f"{self.done_items}/{self.total_items} {self.unit_items}s", refresh=False)

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> "BudgetBar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
