"""The runtime API decides exactly as the agent loop's hooks: the same episode reached both ways — inside
toolwise's loop (the hook inputs recorded at each decision) and as converted OpenAI messages — gives identical
features, probabilities and actions for ToolGate and G-STEP (and the probe's read on the same prompt)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from controllers import ContractMismatch, GStepMLP, LinearProbe, ToolGateLogistic, make_contract
from data_builders.agent import prompts as P
from data_builders.agent.hooks import Hooks
from data_builders.agent.loop import Agent, AgentConfig
from data_builders.backends.base import Backend, Generation
from data_builders.gates import gate_named, gate_of_kind
from data_builders.features.gstep import N_FEATURES
from data_builders.features.toolgate import EMBEDDING_DIM, structural_names
from data_builders.tasks.schema import Task
from runtime.api import SKIPPED_TOOL_MESSAGE, Gates
from runtime.controller_hooks import GateHook
from data_builders.agent.openai_messages import answer_episode, to_openai, call_episode

REPO = Path(__file__).resolve().parents[2]


def calc_task(tid, expr, answer, difficulty="easy"):
    return Task.from_dict({
        "id": tid, "instruction": f"Answer with only the number: {expr}", "difficulty": difficulty,
        "environments": [{"name": "CalculatorEnv", "tools": ["evaluate_expression", "get_last_result",
                                                              "clear_last_result"], "parameters": {}}],
        "expected": {"answer": answer}, "tags": ["calculator"]}, split="test")


class ScriptedTiny(Backend):
    """The tiny random Llama's tokenizer, chat template, prefill and log-probs, with the reply *text* scripted
    per task (a random model writes no tool calls): each reply is scored by the model, so token counts and
    log-probs are the model's own."""

    def __init__(self, tiny, scripts: dict[str, list[str]]):
        self.tiny, self.scripts, self.rounds = tiny, scripts, {}
        self.model_id, self.n_layers, self.config = tiny.model_id, tiny.n_layers, tiny.config

    @property
    def fingerprint(self):
        return self.tiny.fingerprint

    def render(self, messages, tools=None):
        return self.tiny.render(messages, tools)

    def count_tokens(self, text):
        return self.tiny.count_tokens(text)

    def prefill(self, prompts, layers=None):
        return self.tiny.prefill(prompts, layers)

    @torch.no_grad()
    def generate(self, prompts, params=None, *, prefill_state=None, return_logprobs=False, cache_keys=None):
        tok, out = self.tiny.tokenizer, []
        for prompt, key in zip(prompts, cache_keys):
            k = self.rounds[key] = self.rounds.get(key, -1) + 1
            script = next(s for marker, s in self.scripts.items() if marker in prompt)
            text = script[min(k, len(script) - 1)]
            p_ids = tok(prompt, add_special_tokens=False).input_ids
            ids = tok(text, add_special_tokens=False).input_ids
            logits = self.tiny.model(torch.tensor([p_ids + ids])).logits[0, len(p_ids) - 1:-1].float()
            lps = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None])[:, 0].tolist()
            out.append(Generation(text=text, token_ids=ids, prompt_tokens=len(p_ids), finish_reason="stop",
                                  logprobs=lps if return_logprobs else None))
        return out


class Recorder(Hooks):
    """The loop's hooks, recording what each one saw (a deep copy: the loop keeps mutating its lists), the
    controller input its featurizer computed, and its decision."""

    def __init__(self, probe: GateHook | None, gate: GateHook, gstep: GateHook):
        self.probe, self.gate, self.gstep = probe, gate, gstep
        self.hidden_layers = probe.hidden_layers if probe else None
        self.points: list[dict] = []

    def pre_generation(self, task, state):
        if self.probe is None:
            return None
        self.points.append(dict(gate="probe_prefill", task=task, x=gate_named("probe_prefill").run_input(state),
                                decision=self.probe.decision(state)))
        return self.probe.pre_generation(task, state)

    def pre_call(self, episode, call):
        d = self.gate.decision(episode, call)
        self.points.append(dict(gate="toolgate", task=episode.task, n=len(episode.messages),
                                view=copy.deepcopy(episode), x=gate_named("toolgate").run_input(episode, call), decision=d))
        return d.action

    def on_answer(self, episode, answer_text):
        d = self.gstep.decision(episode, answer_text)
        self.points.append(dict(gate="g_step", task=episode.task, n=len(episode.messages),
                                view=copy.deepcopy(episode), x=gate_named("g_step").run_input(episode, answer_text), decision=d))
        return d.action


def run_recorded(backend, tasks, gates: Gates, config: AgentConfig, style="soft"):
    probe = GateHook("probe_prefill", gates.probe_prefill, gates.taus.get("probe_prefill"),
                     {"style": style, "call_format": gates.call_format}) if gates.probe_prefill is not None else None
    hooks = Recorder(probe, GateHook("toolgate", gates.toolgate, gates.taus.get("toolgate")),
                     GateHook("g_step", gates.g_step, gates.taus.get("g_step")))
    agent = Agent(backend, config, hooks)
    trajs = {t.task_id: t for t in agent.run(tasks)}
    tools = {t.id: agent._start(t, -1).tools for t in tasks}
    return trajs, tools, hooks.points


def meta(task: Task) -> dict:
    """What a deployment tells the gates about its task (the instruction comes from the messages)."""
    return {"difficulty": task.difficulty, "category": task.category, "multi_step": task.multi_step}


def check_both_ways(trajs, tools, points, gates: Gates, *, counter_backend=None, probe_backend=None) -> dict:
    """Every recorded decision, recomputed from the episode's OpenAI messages; returns counts per gate/action."""
    seen: dict[tuple[str, str], int] = {}
    for k, pt in enumerate(points):
        task, d_loop = pt["task"], pt["decision"]
        traj = trajs[task.id]
        oa = to_openai(traj.messages, traj.turns, call_format=gates.call_format)
        assert len(oa) == len(traj.messages)
        if pt["gate"] == "probe_prefill":
            first = next(i for i, m in enumerate(oa) if m["role"] == "assistant")
            d_api = gates.first_turn(probe_backend, oa[:first], tools[task.id])
            assert d_api.action == d_loop.action
            assert d_api.probability == pytest.approx(d_loop.probability, abs=1e-4)   # batch vs single prefill
        elif pt["gate"] == "toolgate":
            n = pt["n"]
            # alternate the two ways a client names the call: the proposing message, or its tool call
            call = oa[n] if k % 2 else oa[n]["tool_calls"][0]
            history = oa[:n] if k % 2 else oa[: n + 1]
            view, parsed = call_episode(history, tools[task.id], call, task=meta(task),
                                            call_format=gates.call_format)
            loop_view = pt["view"]
            assert view.messages == loop_view.messages and view.round == loop_view.round
            assert [(c.name, c.args, c.status, c.result) for c in view.calls] == \
                   [(c.name, c.args, c.status, c.result) for c in loop_view.calls]
            assert torch.equal(gate_named("toolgate").run_input(view, parsed), pt["x"])
            d_api = gates.tool_call(history, tools[task.id], call, task=meta(task))
            assert (d_api.action, d_api.probability, d_api.tau) == (d_loop.action, d_loop.probability, d_loop.tau)
        else:
            n = pt["n"]
            ans = oa[n]
            kw = dict(usage=ans["usage"], finish_reason=ans["finish_reason"], task=meta(task))
            view, text = answer_episode(oa[:n], tools[task.id], ans["content"], ans["logprobs"],
                                        call_format=gates.call_format, **kw)
            assert view.messages == pt["view"].messages and view.round == pt["view"].round
            assert torch.equal(gate_named("g_step").run_input(view, text), pt["x"])
            d_api = gates.answer(oa[:n], tools[task.id], ans["content"], ans["logprobs"], **kw)
            assert (d_api.action, d_api.probability, d_api.tau) == (d_loop.action, d_loop.probability, d_loop.tau)
            if counter_backend is not None:
                # no usage on any message: the policy's tokenizer recounts the prompts, the log-probs the tokens
                bare = [{k2: v for k2, v in m.items() if k2 != "usage"} for m in oa[: n + 1]]
                counted = Gates({"g_step": gates.g_step}, call_format=gates.call_format, counter=counter_backend)
                view2, text2 = answer_episode(bare[:n], tools[task.id], ans["content"], ans["logprobs"],
                                              finish_reason=ans["finish_reason"], task=meta(task),
                                              call_format=gates.call_format, counter=counter_backend)
                assert torch.equal(gate_named("g_step").run_input(view2, text2), pt["x"])
                d2 = counted.answer(bare[:n], tools[task.id], ans["content"], ans["logprobs"],
                                    finish_reason=ans["finish_reason"], task=meta(task))
                assert d2.probability == d_loop.probability
        seen[(pt["gate"], d_loop.action)] = seen.get((pt["gate"], d_loop.action), 0) + 1
    return seen


# ---------------------------------------------------------------- the tiny random Llama (fast)
def _scripts(fmt: str) -> dict[str, list[str]]:
    call = lambda expr: P.tool_call_text("evaluate_expression", {"expression": expr}, fmt)  # noqa: E731
    return {
        # a call with reasoning (rejected: default mode, no reason-then-act), the call, an answer, a re-answer
        "7*7": [f"Let me compute this.\n{call('7*7')}", call("7*7"), "\\boxed{49}", "\\boxed{48}"],
        # a content turn (format error), a call, a wrong answer after the tool, then the right one
        "12+30": ["I am not sure.", call("12+30"), "\\boxed{41}", "\\boxed{42}"],
        # two calls, the second sees the first's result; then an answer
        "3*(4+5)": [call("4+5"), call("3*9"), "\\boxed{27}", "\\boxed{27}"],
    }


@pytest.fixture(scope="module")
def tiny_gates(tiny_backend, tmp_path_factory):
    """Random gates on the tiny policy's features, exported and loaded as a deployment would."""
    policy = tiny_backend.fingerprint
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("gates")
    width = EMBEDDING_DIM + len(structural_names())
    ctrl = {"toolgate": ToolGateLogistic(contract=make_contract(gate_of_kind("flip").featurizer.id, policy, [width])),
            "g_step": GStepMLP(contract=make_contract(gate_of_kind("commit").featurizer.id, policy, [N_FEATURES]), hidden=8),
            "probe_prefill": LinearProbe(contract=make_contract(gate_of_kind("probe").featurizer.id, policy,
                                                               [tiny_backend.n_layers + 1,
                                                                tiny_backend.config.hidden_size]))}
    for name, c in ctrl.items():
        c.save_pretrained(root / name)
    return {name: str(root / name) for name in ctrl}


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["native", "xml"])
@pytest.mark.parametrize("tau", [0.0, 1.0])   # 0: every call executes, every answer continues; 1: the opposite
def test_loop_and_openai_messages_give_identical_features_and_decisions(tiny_backend, tiny_gates, fmt, tau):
    # the probe runs in the τ=0 episodes only: a prefilled episode skips the reasoning-rule checks
    paths = tiny_gates if tau == 0.0 else {k: v for k, v in tiny_gates.items() if k != "probe_prefill"}
    gates = Gates.load(**paths, policy=tiny_backend.fingerprint, call_format=fmt,
                       taus={"toolgate": tau, "g_step": tau})
    assert gates.call_format == fmt
    tasks = [calc_task(1, "7*7", "49"), calc_task(2, "12+30", "42", "medium"), calc_task(3, "3*(4+5)", "27")]
    backend = ScriptedTiny(tiny_backend, _scripts(fmt))
    trajs, tools, points = run_recorded(backend, tasks, gates, AgentConfig(mode="default", call_format=fmt,
                                                                           max_rounds=6))
    seen = check_both_ways(trajs, tools, points, gates, counter_backend=tiny_backend, probe_backend=tiny_backend)
    if tau == 0.0:
        assert seen.get(("toolgate", "execute"), 0) >= 3 and seen.get(("g_step", "continue"), 0) == 3
        assert seen.get(("probe_prefill", "use"), 0) + seen.get(("probe_prefill", "skip"), 0) == 3
        assert all(t.turns[0].prefill_text for t in trajs.values())
    else:
        assert seen.get(("toolgate", "skip"), 0) >= 3 and seen.get(("g_step", "commit"), 0) == 3
        assert any(c.status == "skipped" for t in trajs.values() for c in t.calls)
        if fmt == "xml":   # the loop reads reasoning text before an xml call: a rejected call
            assert any(c.status == "rejected" for t in trajs.values() for c in t.calls)
    assert any(tr.kind == "content" for t in trajs.values() for tr in t.turns)


def test_skipped_tool_message_is_the_loops_and_reads_back_as_skipped(tiny_gates):
    gates = Gates.load(**tiny_gates, call_format="xml")
    call = {"id": "c1", "type": "function", "function": {"name": "evaluate_expression",
                                                          "arguments": '{"expression": "2+2"}'}}
    msgs = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": SKIPPED_TOOL_MESSAGE}]
    view, _ = call_episode(msgs, [], {**call, "id": "c2"}, call_format="xml")
    assert [c.status for c in view.calls] == ["skipped"]
    assert gates.tool_call(msgs, [], {**call, "id": "c2"}).gate == "toolgate"


def test_absent_gates_answer_none_and_decisions_carry_their_tau_and_latency(tiny_gates):
    only_gate = Gates.load(toolgate=tiny_gates["toolgate"], taus={"toolgate": 0.25})
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    assert only_gate.answer(msgs, [], "\\boxed{4}", None, usage={"prompt_tokens": 5, "completion_tokens": 3}) is None
    assert only_gate.first_turn(None, msgs, []) is None
    call = {"type": "function", "function": {"name": "evaluate_expression", "arguments": '{"expression": "2+2"}'}}
    d = only_gate.tool_call(msgs, [], call)
    assert d.gate == "toolgate" and d.tau == 0.25 and d.latency_ms > 0 and 0 < d.probability < 1
    assert d.action == ("execute" if d.probability >= 0.25 else "skip")
    with pytest.raises(ValueError, match="taus: unknown gate"):
        Gates.load(toolgate=tiny_gates["toolgate"], taus={"tool_gate": 0.5})


def test_warmup_loads_the_toolgate_encoder_before_the_first_decision(tiny_gates):
    from data_builders.features import minilm
    loaded = (minilm.sentence_transformer, minilm.onnx_session)
    for f in loaded:
        f.cache_clear()
    gates = Gates.load(toolgate=tiny_gates["toolgate"])
    assert all(f.cache_info().currsize == 0 for f in loaded)     # loading a gate does not load MiniLM
    assert gates.warmup() is gates and all(f.cache_info().currsize == 1 for f in loaded)   # model and ONNX graph
    g_step_only = Gates.load(g_step=tiny_gates["g_step"])
    for f in loaded:
        f.cache_clear()
    g_step_only.warmup()
    assert all(f.cache_info().currsize == 0 for f in loaded)     # G-STEP needs no encoder


def test_a_gate_of_another_policy_is_refused(tiny_gates, tiny_backend):
    with pytest.raises(ContractMismatch):
        Gates.load(g_step=tiny_gates["g_step"], policy="some-other-model@1")
    Gates.load(g_step=tiny_gates["g_step"], policy="some-other-model@1", strict=False)   # explicitly lenient
    gates = Gates.load(probe_prefill=tiny_gates["probe_prefill"])

    class Other:
        fingerprint = "some-other-model@1"
    with pytest.raises(ContractMismatch):
        gates.first_turn(Other(), [{"role": "user", "content": "hi"}], [])


def _own_tool_tasks(tmp_path) -> list[Task]:
    """A task file of a team's own: one Python function as the tool (run in a worker process), free-form
    numeric answers; read as ``tasks=custom`` reads it."""
    import json

    from data_builders.tasks.custom import read_custom
    source = {"kind": "functions", "functions": ["tests.data_builders.tool_sources.functions_fixture:convert_units"],
              "path": str(REPO)}
    records = [dict(id="km", instruction="How many metres are 3 km? Use the converter.", answer="3000"),
               dict(id="cm", instruction="How many metres are 250 cm?", answer="2.5", difficulty="hard"),
               dict(id="mm", instruction="Convert 2 km to cm.", answer="200000", category="multi")]
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps({**r, "tools": [source], "scorer": {"kind": "numeric", "tolerance": 1e-6},
                                        "split": "test"}) + "\n" for r in records))
    return read_custom(path)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["native", "xml"])
def test_own_tools_loop_and_openai_messages_give_identical_decisions(tiny_backend, tiny_gates, tmp_path, fmt):
    """A team's own tool (a Python function, its schema from transformers' get_json_schema) through the loop and
    through converted OpenAI messages: the same ToolGate features (the structural ones read off the tool's own
    schema and description, which only the ``tools`` list carries) and the same decisions, both ways."""
    call = lambda args: P.tool_call_text("convert_units", args, fmt)  # noqa: E731
    scripts = {
        "3 km": [call({"value": 3, "from_unit": "km", "to_unit": "m"}), "\\boxed{3000}", "\\boxed{3000}"],
        # an undeclared argument and a wrong type: the columns that read the schema must see it both ways
        "250 cm": [call({"value": "250", "from_unit": "cm", "to_unit": "m", "precise": True}), "\\boxed{2.5}",
                   "\\boxed{2.5}"],
        "2 km": [call({"value": 2, "from_unit": "km", "to_unit": "m"}),
                 call({"value": 2000, "from_unit": "m", "to_unit": "cm"}), "\\boxed{200000}", "\\boxed{200000}"],
    }
    for tau in (0.0, 1.0):
        gates = Gates.load(toolgate=tiny_gates["toolgate"], g_step=tiny_gates["g_step"],
                           policy=tiny_backend.fingerprint, call_format=fmt, taus={"toolgate": tau, "g_step": tau})
        tasks = _own_tool_tasks(tmp_path)
        trajs, tools, points = run_recorded(ScriptedTiny(tiny_backend, scripts), tasks, gates,
                                            AgentConfig(mode="default", call_format=fmt, max_rounds=6))
        assert {t["function"]["name"] for ts in tools.values() for t in ts} == {"convert_units"}
        seen = check_both_ways(trajs, tools, points, gates, counter_backend=tiny_backend)
        executed = [c for t in trajs.values() for c in t.calls if c.status == "executed"]
        if tau == 0.0:
            assert seen[("toolgate", "execute")] >= 3 and seen[("g_step", "continue")] == 3
            assert any(c.result and "3000" in str(c.result) for c in executed)     # the function ran, in its worker
        else:
            assert seen[("toolgate", "skip")] >= 3 and not executed
        names = structural_names()
        rows = [pt["x"][0, EMBEDDING_DIM:] for pt in points if pt["gate"] == "toolgate"]
        # the tool was offered with its three parameters; only the call with an undeclared argument shows one
        assert all(x[names.index("tool_offered")] == 1 for x in rows)
        assert all(x[names.index("schema_params")].item() == pytest.approx(0.3) for x in rows)
        assert sum(x[names.index("unknown_args")].item() > 0 for x in rows) == 1

# ---------------------------------------------------------------- the embedded policy (slow)
@pytest.mark.slow
def test_embedded_policy_loop_and_openai_messages_agree_with_the_committed_gates():
    import recipes
    from data_builders.backends.loading import load_backend
    from data_builders.tasks import load_tasks

    ref = recipes.compose("rollout").checkpoints      # composed: tool_sft names a release key
    policy = load_backend("smollm2", adapter=ref.tool_sft)
    gates = Gates.load(toolgate=str(REPO / ref.toolgate), g_step=str(REPO / ref.g_step), policy=policy.fingerprint)
    assert gates.call_format == "xml"
    tasks = load_tasks("builtin", limit=8, difficulties=["easy", "medium"])
    trajs, tools, points = run_recorded(policy, tasks, gates, AgentConfig(mode="default", max_rounds=4,
                                                                          max_new_tokens=96))
    seen = check_both_ways(trajs, tools, points, gates, counter_backend=policy)
    assert sum(n for (g, _), n in seen.items() if g == "toolgate") >= 1, seen
    assert sum(n for (g, _), n in seen.items() if g == "g_step") >= 1, seen


def test_the_committed_g_step_commits_a_short_tool_free_chat_answer_as_out_of_support():
    """A plain chat answer (one user message, no tools, a 37-token context): every episode G-STEP was trained on
    called a tool over a long context, and on this input the network extrapolates to p ~ 1, sending every such
    answer back for verification. Past its support limit it takes the open action and says why; with the limit
    off it decides as before. The same answer boxed is decided the same way: the episode's shape, not the box."""
    import recipes

    ref = recipes.compose("rollout").checkpoints
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    usage = {"prompt_tokens": 37, "completion_tokens": 8, "total_tokens": 45}
    logprobs = [-0.02, -0.01, -0.3, -0.05, -1.4, -0.01, -0.02, -0.2]
    limited = Gates.load(g_step=str(REPO / ref.g_step), strict=False)
    unlimited = Gates.load(g_step=str(REPO / ref.g_step), strict=False, support_z={"g_step": None})
    assert limited.support_z == {"g_step": gate_named("g_step").support_z}
    for answer in ("The capital of France is Paris.", "The capital of France is \\boxed{Paris}."):
        d = limited.answer(chat, [], answer, logprobs, usage=usage, finish_reason="stop")
        raw = unlimited.answer(chat, [], answer, logprobs, usage=usage, finish_reason="stop")
        assert raw.action == "continue" and raw.probability > 0.9 and raw.reason is None
        assert d.support > gate_named("g_step").support_z
        assert (d.action, d.reason, d.probability) == ("commit", "out_of_support", raw.probability)
    with pytest.raises(ValueError, match="support_z: unknown gate"):
        Gates.load(g_step=str(REPO / ref.g_step), strict=False, support_z={"nope": 1.0})
