"""Progress of the phases that generate (data_builders/progress.py): the accounting is exact (a bar ends at its
total, budgets nest, work past a plan grows the total), and a batched build's bar reports an ETA within 2x of the
truth once a tenth of the work is done — the build is ``data_builders.build.run`` with the real agent loop and
labeler on a fake backend whose time per decode segment grows with the rows still decoding, as a batched CPU
decode's does."""
from __future__ import annotations

import hashlib
import io
import json
import time

import pytest

import data_builders.build
import recipes
from data_builders import progress
from data_builders.backends import loading
from data_builders.backends.base import Generation
from data_builders.protocol import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from tests.doubles import ScriptedBackend


def metered():
    seen: list[progress.Work] = []
    return seen, progress.metering(seen.append)


def test_a_budget_is_planned_up_front_and_spent_in_full_by_its_end():
    seen, meter = metered()
    with meter:
        with progress.budget(100) as plan:      # an agent's rounds
            assert seen[-1][:3] == (100, 0, 0)
            with progress.budget(40):           # one generation inside it plans nothing more
                progress.generated(10)
            assert seen[-1][:3] == (100, 10, 30)    # its unused 30 credited when it returned
            plan.replan(70)                     # the agent expects less now
            assert seen[-1][:3] == (70, 10, 30)
            progress.generated(20)
        assert seen[-1][:3] == (70, 30, 40) and seen[-1].spent == 70 and seen[-1][3:] == (30, 70, 0)
        progress.generated(7)                   # work outside any budget moves total and count alike
        assert seen[-1][:3] == (77, 37, 40)


def test_work_past_its_plan_grows_the_total_and_no_meter_is_a_no_op():
    seen, meter = metered()
    with meter:
        with progress.budget(10) as plan:
            progress.generated(8)
            progress.generated(5)
            plan.replan(2)                      # never below what is spent
        assert seen[-1][:3] == (13, 13, 0) and all(w.spent <= w.planned for w in seen)
    progress.generated(5)                       # outside a meter: nothing to report to, nothing raised
    with progress.budget(3) as plan:
        plan.replan(1)
    assert seen[-1][:3] == (13, 13, 0)


def test_a_backend_call_that_returns_whole_counts_its_tokens_as_generated():
    # vLLM's and an API's generate report nothing while they decode: before, the bar read 0 tokens to the end
    class Whole:
        reported = 0

        @progress.generation
        def generate(self, prompts, params):
            progress.generated(self.reported)    # a backend reporting part of it (HF reports every step)
            return [Generation(text="x", token_ids=[1] * n, prompt_tokens=1, finish_reason="eos") for n in prompts]

    params = type("P", (), {"max_new_tokens": 8})()
    seen, meter = metered()
    with meter:
        Whole().generate([3, 5], params)
        assert seen[-1][:3] == (16, 8, 8)           # 16 planned, the 8 tokens it returned, the unused 8 credited
        backend = Whole()
        backend.reported = 6
        backend.generate([3, 5], params)            # what it reported is not counted twice
        assert seen[-1][:3] == (32, 16, 16)
        backend.generate([9, 9], params)            # 18 returned, but never past the call's own budget of 16
        assert seen[-1][:3] == (48, 32, 16)


def test_the_expected_tokens_scale_the_open_budget_by_the_share_generated():
    assert progress.expected_tokens(progress.Work(1000, 0, 0)) == 1000
    # calls that returned used 30 of their 100: the open 800 at that share
    assert progress.expected_tokens(progress.Work(1000, 150, 50, 30, 100)) == 150 + 800 * 0.3
    # the first batch still decoding: 100 generated, 100 credited (rows that stopped), 200 left to its live rows,
    # expected to stop halfway through it
    assert progress.expected_tokens(progress.Work(1000, 100, 100, 0, 0, 200)) == 100 + 800 * (200 / 400)


def test_the_bar_extrapolates_the_shards_not_started_from_those_that_did():
    bar = progress.BudgetBar("t", {0: 4, 1: 4, 2: 2}, file=io.StringIO())
    bar.work(0, progress.Work(400, 100, 0))
    assert (bar.bar.total, bar.bar.n) == (1000, 100)        # 10 items at the 100 per item of shard 0
    bar.work(1, progress.Work(200, 50, 50))
    # both shards at the share generated of all they spent (150 of 200), the 2 items not started alike
    assert bar.bar.total == round((150 + (600 - 200) * 0.75) * 10 / 8)
    bar.work(0, progress.Work(400, 300, 100))
    bar.work(1, progress.Work(200, 100, 100))
    bar.work(2, progress.Work(100, 100, 0))
    assert (bar.bar.total, bar.bar.n) == (500, 500)
    bar.tick()
    assert bar.done_items == 1 and bar.total_items == 10
    bar.close()


def test_once_a_shard_finished_the_others_are_expected_at_its_tokens_per_item():
    bar = progress.BudgetBar("t", {0: 4, 1: 4, 2: 2}, file=io.StringIO())
    for _ in range(4):
        bar.tick(0)
    bar.work(0, progress.Work(400, 120, 280))              # finished: 30 tokens per item
    bar.work(1, progress.Work(400, 30, 50))
    assert bar.bar.total == 120 + 4 * 30 + 2 * 30
    bar.work(1, progress.Work(400, 150, 150))              # past the guess: expected to end where it is
    assert bar.bar.total == 120 + 150 + 2 * 30
    bar.close()


# ------------------------------------------------------------------------------- a batched build, timed
SEGMENT = 4             # tokens per decode segment, as the HF backend decodes in segments
ROW_S = 0.002          # seconds per row and segment: a batched decode step costs more the more rows decode
PREFILL_S = 0.004       # seconds per prompt prefilled before decoding: a first prompt (system prompt, tool listing)
                        # costs this, a later turn's (what was appended) a fifth of it, as the HF backend's do


class TimedBackend(ScriptedBackend):
    """Replies by rule (0-2 calls to the environment's first tool before the answer, by task; some reasoning of
    0-35 words before each call or answer) and takes time as a batched generation does: a prefill first, generating
    nothing (PREFILL_S per first prompt), then per segment of SEGMENT tokens, ROW_S per row still decoding. Reports
    its tokens per segment, as the HF backend does."""

    def __init__(self):
        super().__init__({})

    def _reply(self, prompt: str) -> str:
        doc = json.loads(prompt[:prompt.rindex("}") + 1])
        question = next(m["content"] for m in doc["messages"] if m["role"] == "user")
        h = int(hashlib.sha256(question.encode()).hexdigest(), 16)
        turns = sum(m["role"] == "assistant" for m in doc["messages"])
        # each turn some reasoning first (its length varies by task and turn, not by what the turn ends with)
        reasoning = " ".join(["so"] * ((h >> (4 + 6 * turns)) % 36))
        if turns < h % 3 and doc["tools"]:
            call = json.dumps({"name": doc["tools"][0], "arguments": {}})
            return f"{reasoning} {TOOL_CALL_OPEN}\n{call}\n{TOOL_CALL_CLOSE}".strip()
        return f"{reasoning} \\boxed{{{h % 7}}}".strip()

    @progress.generation
    def generate(self, prompts, params=None, *, prefill_state=None, return_logprobs=False, cache_keys=None,
                 constraints=None):
        texts = [self._reply(p) for p in prompts]
        lengths = [min(len(t.split()), params.max_new_tokens) for t in texts]
        first = sum('"role": "assistant"' not in p for p in prompts)
        time.sleep(PREFILL_S * (first + (len(prompts) - first) / 5))
        left, live, decoded = params.max_new_tokens, list(range(len(prompts))), 0
        while live:
            time.sleep(ROW_S * len(live))
            left -= SEGMENT
            ended = [r for r in live if lengths[r] <= params.max_new_tokens - left or left <= 0]
            progress.generated(len(live) * SEGMENT)
            progress.credit(len(ended) * max(left, 0))
            decoded += len(live) * SEGMENT
            live = [r for r in live if r not in ended]
        progress.close(decoded, len(prompts) * params.max_new_tokens)     # the batch ended, as HF's does
        return [Generation(text=t, token_ids=list(range(n)), prompt_tokens=len(p.split()), finish_reason="stop",
                           logprobs=[-0.5] * n if return_logprobs else None)
                for t, n, p in zip(texts, lengths, prompts)]



@pytest.mark.parametrize("shard_size", [48, 16])
def test_a_batched_builds_eta_is_within_2x_of_the_truth_after_a_tenth_of_the_work(tmp_path, monkeypatch,
                                                                                    shard_size):
    """One batched shard of 48 episodes (the case whose bar sat at 0-1 tasks for minutes), and three of 16."""
    records: list[tuple[float, float | None]] = []

    class Recorded(progress.BudgetBar):
        def work(self, key, work):
            super().work(key, work)
            records.append((time.monotonic() - self.started, self.eta_s()))

        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.started = time.monotonic()
            recorded.append(self)

    recorded: list = []
    monkeypatch.setattr(loading, "backend_from_config", lambda *a, **k: TimedBackend())
    monkeypatch.setattr(data_builders.build, "BudgetBar", Recorded)
    cfg = recipes.compose("build", ["kind=commit", "tasks=builtin", "tasks.n_per_cell=2", "limit=24",
                                    f"shard_size={shard_size}", "agent.max_rounds=3", "agent.max_new_tokens=48",
                                    f"out_dir={tmp_path / 'points'}"])
    data_builders.build.run(cfg)
    total_s = records[-1][0]
    (bar,) = recorded
    # the bar ends at its total, every task ticked (limit=24 per split: 48 tasks)
    assert bar.bar.n == bar.bar.total and bar.done_items == bar.total_items == 48
    checked = [(t, eta) for t, eta in records if t >= 0.1 * total_s and total_s - t >= 0.05 * total_s]
    assert len(checked) >= 10
    # no estimate ("?") only until the first tokens have come twice: the first prompts' prefill generates nothing
    assert all(eta is not None for t, eta in checked if t >= 0.2 * total_s)
    # within 2x of the truth, give or take 5 % of the run: in the last stretch a few rows decode and a step's fixed
    # cost weighs more, so a small remainder can be twice what the rate says; the last 5 % are not judged
    slack = 0.05 * total_s
    for t, eta in checked:
        truth = total_s - t
        assert eta is None or truth / 2 - slack <= eta <= 2 * truth + slack, \
            f"at {t:.2f} s of {total_s:.2f} s the bar said {eta:.2f} s left, the truth was {truth:.2f} s"


def test_an_agents_expected_generations_follow_its_stop_rate():
    from data_builders.agent.loop import expected_generations

    # before any stop: a stop equally likely in each round left (1 done of 3: 2 or 3 in all, 2.5 expected)
    assert expected_generations([], [(1, 3)], 0, 3) == 2.5
    assert expected_generations([], [], 2, 3) == 2 * 2.0
    # two stopped after 2 rounds each (2 stops in 6 rounds seen): 3 rounds to a stop, capped by the rounds left
    assert expected_generations([2, 2], [(2, 5)], 1, 3) == 4 + (2 + 3) + 3
    assert expected_generations([2, 2], [(2, 3)], 0, 3) == 4 + (2 + 1)
