"""Acceptance: the whole pipeline on a team's own tools, as the README's "Bring your own tools" tells a user to run it.

A real MCP server (the ``mcp`` SDK's, ``tests/data_builders/tool_sources/mcp_server_fixture.py``) serves the tools,
over stdio (each CLI starts it from the task file's ``command``) and over streamable HTTP (started here, named
by ``url``). A task file names it; then every step is the real CLI in its own process:

    python -m data_builders.build kind=probe|flip|commit tasks=custom tasks.path=...   decision points
    python -m trainers.fit recipe=probe_prefill|toolgate|g_step recipe.points.dir=...  the three gates
    python -m trainers.evaluate tasks=custom ... checkpoints.<gate>=...                 every arm, one report

The policy is the suite's tiny random Llama after under a minute of training on one fixed script
(:func:`script_examples`), saved as an ordinary model directory (``model=hf model.name=<dir>``). Why not the random model itself: it never
writes a parseable call or a ``\\boxed{}`` answer, so its flip and commit builds are empty (no proposed call, no
answer) and its probe labels are all "tool needed"; no gate could be fit on them. Constrained decoding
(``agent.constrained_calls``) does not help there: it constrains a call once the model opens one, and the builds
do not take agent settings. The script is the least a policy needs for every gate to see both labels:

* after the task prompt, in any mode: call ``lookup {"key": "capital:japan"}``;
* after that call's result, or after the call was refused (hard_no_tool): answer ``\\boxed{Tokyo}``;
* a forced answer (``\\boxed{`` appended, the flip labeller's probe) says ``0`` before the call and ``Tokyo``
  after its result.

So the tasks whose gold is Tokyo are solved with the tool and even without it once refused (probe label 0), the
call flips their forced answer from wrong to right (flip label 1) and their answer is right (commit label 0);
every other task is the reverse on all three. Each decision reads the last few tokens only, which a two-layer
model learns in ~100 steps.
"""
from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, DynamicCache, LlamaForCausalLM

from controllers import load as load_controller
from data_builders.agent import prompts as P
from data_builders.agent.trajectory import read_trajectories
from data_builders.backends.chat import render_chat
from data_builders.environments import make_environment
from data_builders.environments.base import serialize
from data_builders.points.store import load_points
from data_builders.tasks import load_tasks
from tests.conftest import REPO
from tests.data_builders.tool_sources.test_mcp import SERVER, free_port, start_http_server, stop

CALL = ("lookup", {"key": "capital:japan"})
SERVER_ANSWER = "Tokyo"          # what the fixture's lookup table holds for that key
ANSWER = "\\boxed{Tokyo}"
WRONG_FORCED = "0}"
NUMERIC = {"kind": "numeric", "tolerance": 0.01, "relative": True}
# (id, split, instruction, gold, scorer); "j" tasks are the ones the script solves
TASKS = [
    ("j1", "train", "What is the capital of Japan?", "Tokyo", "normalized"),
    ("j2", "train", "Name the capital city of Japan.", "tokyo", "normalized"),
    ("x1", "train", "Convert 2 km to m.", "2000", NUMERIC),
    ("x2", "train", "What is the capital of France?", "Paris", "normalized"),
    ("x3", "train", "Convert 3 mi to km.", "4.828", NUMERIC),
    ("j3", "test", "Which city is the capital of Japan?", "Tokyo", "normalized"),
    ("x4", "test", "Convert 10 ft to m.", "3.048", NUMERIC),
    ("x5", "test", "What is the capital of Italy?", "Rome", "normalized"),
]
SOLVED = {tid for tid, *_ in TASKS if tid.startswith("j")}
# The script's call format, pinned on every command line rather than left to the model-id heuristic.
CALL_FORMAT = "native"
# Every turn of the script fits (the call is ~20 tokens); a turn off the script stops here.
MAX_NEW_TOKENS = 32
CLI_TIMEOUT_S = 600


def write_tasks(path: Path, source: dict) -> Path:
    path.write_text("".join(json.dumps({"id": tid, "instruction": text, "answer": gold, "scorer": scorer,
                                        "split": split, "category": "capital" if "capital" in text else "conversion",
                                        "tools": [source]}) + "\n"
                            for tid, split, text, gold, scorer in TASKS))
    return path


# ------------------------------------------------------------------------------------------------ the policy
def script_examples(tokenizer, task_file: Path) -> list[tuple[str, str]]:
    """(prompt, continuation) pairs of the script, rendered by the agent's own prompt code for every task, with the
    tool result the server really returns (so the training prompts are the ones the CLIs will render)."""
    call = P.tool_call_text(*CALL, CALL_FORMAT)
    out = []
    for task in [t for split in ("train", "test") for t in load_tasks("custom", split=split, path=str(task_file))]:
        env = make_environment(task.env)
        result = env.call(*CALL)
        assert result == {"success": True, "result": SERVER_ANSWER}, result

        def render(messages, tools=env.tool_specs()):
            return render_chat(tokenizer, P.template_messages(messages), tools)

        def opening(mode):
            return P.initial_messages(task.instruction, task.env.name, mode, False, CALL_FORMAT)

        def then(text, reply):
            return [{"role": "assistant", "content": text}, reply]

        after_tool = opening("default") + then(call, P.tool_response_message(serialize(result), CALL_FORMAT))
        refused = opening("hard_no_tool") + then(call, {"role": "user", "content": P.TOOLS_UNAVAILABLE})
        out += [(render(opening("default")), call), (render(opening("hard_no_tool")), call),
                (render(opening("default")) + "\\boxed{", WRONG_FORCED),
                (render(refused), ANSWER), (render(after_tool), ANSWER),
                (render(after_tool) + "\\boxed{", SERVER_ANSWER + "}")]
    return out


def train_script(base: Path, out: Path, examples: list[tuple[str, str]], *, min_margin: float = 2.0,
                 max_steps: int = 400, lr: float = 6e-3) -> Path:
    """``base`` fine-tuned (all weights, Adam, full batch) until every continuation token of ``examples``, each
    followed by EOS, wins greedy decoding by ``min_margin`` logits; saved to ``out``.

    Every prompt starts with the same system prompt and tool listing (~700 of its ~800 tokens): that prefix runs
    once per step, batch 1, and its keys/values are repeated for the batch of tails, gradients included: the
    same computation as the full batch, about 3x cheaper on a 2-core CPU."""
    tok = AutoTokenizer.from_pretrained(base)
    model = LlamaForCausalLM.from_pretrained(base)       # float32, as the tiny model is saved
    # transformers 5 renamed forward's past_key_values to cache (the HF backend supports both the same way)
    cache_kw = "cache" if "cache" in inspect.signature(model.model.forward).parameters else "past_key_values"
    pairs = [(tok(p, add_special_tokens=False).input_ids, tok(c + tok.eos_token, add_special_tokens=False).input_ids)
             for p, c in examples]
    n = 0
    while all(len(p) > n + 1 and p[n] == pairs[0][0][n] for p, _ in pairs):
        n += 1
    prefix = torch.tensor([pairs[0][0][:n]])
    tails = [p[n:] + c for p, c in pairs]
    width, batch = max(map(len, tails)), len(tails)
    ids = torch.full((batch, width), tok.pad_token_id)
    mask = torch.zeros(batch, n + width, dtype=torch.long)
    mask[:, :n] = 1
    rows, cols, targets = [], [], []
    for i, ((p, c), tail) in enumerate(zip(pairs, tails)):
        ids[i, :len(tail)] = torch.tensor(tail)
        mask[i, n:n + len(tail)] = 1
        for k, token in enumerate(c):        # the logits at the position before each continuation token
            rows.append(i), cols.append(len(p) - n + k - 1), targets.append(token)
    rows, cols, targets = torch.tensor(rows), torch.tensor(cols), torch.tensor(targets)
    positions = (n + torch.arange(width)).expand(batch, width)

    def logits():
        cache = DynamicCache()
        model.model(input_ids=prefix, use_cache=True, **{cache_kw: cache})
        cache.batch_repeat_interleave(batch)
        h = model.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                        **{cache_kw: cache}).last_hidden_state
        return model.lm_head(h[rows, cols])

    def margin(z):
        """The smallest lead of the target token over the best other token (negative: greedy decoding misses)."""
        other = z.scatter(1, targets[:, None], float("-inf")).max(1).values
        return (z.gather(1, targets[:, None])[:, 0] - other).min().item()

    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(max_steps):
        z = logits()
        if margin(z.detach()) >= min_margin:
            break
        loss = torch.nn.functional.cross_entropy(z, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
    else:
        raise AssertionError(f"the script was not learnt in {max_steps} steps (margin {margin(z.detach()):.3f})")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def policy(tiny_model_dir, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("own-tools-policy")
    task_file = write_tasks(tmp / "tasks.jsonl", {"kind": "mcp", "command": [sys.executable, str(SERVER)]})
    examples = script_examples(AutoTokenizer.from_pretrained(tiny_model_dir), task_file)
    return train_script(tiny_model_dir, tmp / "scripted-llama", examples)


# ------------------------------------------------------------------------------------------------ the CLIs
def cli(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S)
    assert proc.returncode == 0, f"{' '.join(args[:2])} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc.stdout


@pytest.fixture(params=["stdio", "http"])
def tool_source(request):
    """The task file's tool source for one transport; the HTTP server runs for the test's whole pipeline."""
    if request.param == "stdio":
        yield {"kind": "mcp", "command": [sys.executable, str(SERVER)]}
        return
    port = free_port()
    proc = start_http_server(port)
    yield {"kind": "mcp", "url": f"http://127.0.0.1:{port}/mcp"}
    alive = proc.poll() is None
    stop(proc)
    assert alive, "the HTTP MCP server died during the run"


@pytest.mark.slow
def test_build_fit_and_evaluate_on_a_teams_own_mcp_tools(policy, tool_source, tmp_path):
    task_file = write_tasks(tmp_path / "tasks.jsonl", tool_source)
    policy_args = ["model=hf", f"model.name={policy}", "tasks=custom", f"tasks.path={task_file}"]

    # decision points: every split labelled by the task file's own scorers, no val split (8 tasks)
    points = {}
    for kind in ("probe", "flip", "commit"):
        out = cli("data_builders.build", f"kind={kind}", *policy_args, f"agent.call_format={CALL_FORMAT}",
                  "agent.max_rounds=2", f"agent.max_new_tokens={MAX_NEW_TOKENS}", "val_fraction=0",
                  f"out_dir={tmp_path / 'points' / kind}", f"hydra.run.dir={tmp_path / 'hydra' / f'build-{kind}'}")
        assert "points=8 positives=" in out and f"kind={kind}" in out, out
        points[kind] = load_points(tmp_path / "points" / kind, kind=kind)
    labels = {kind: dict(zip(ds.points["task_id"], ds.points["label"])) for kind, ds in points.items()}
    ids = [tid for tid, *_ in TASKS]
    assert labels["probe"] == {t: int(t not in SOLVED) for t in ids}      # tool needed unless refused-then-right
    assert labels["flip"] == {t: int(t in SOLVED) for t in ids}           # one proposed call per task
    assert labels["commit"] == {t: int(t not in SOLVED) for t in ids}     # continue iff the answer is wrong
    flip = points["flip"].points
    assert set(flip["tool"]) == {CALL[0]} and set(flip["split"]) == {"train", "test"}
    assert {c for t, c in zip(flip["task_id"], flip["flip_class"]) if t in SOLVED} == {"helpful"}

    # the three gates, each fit on its points and exported
    ckpt = {}
    for recipe, kind in (("probe_prefill", "probe"), ("toolgate", "flip"), ("g_step", "commit")):
        ckpt[recipe] = tmp_path / "checkpoints" / recipe
        # no val split: τ fixed (toolgate's recipe would choose it on val)
        tau = ["recipe.calibration.tau_method=fixed"] if recipe == "toolgate" else []
        out = cli("trainers.fit", f"recipe={recipe}", *policy_args, "logger=none",
                  f"recipe.points.dir={tmp_path / 'points' / kind}", f"recipe.export_dir={ckpt[recipe]}", *tau,
                  f"hydra.run.dir={tmp_path / 'hydra' / f'fit-{recipe}'}")
        assert f"{recipe}: test_auroc=" in out, out
        assert (ckpt[recipe] / "model.safetensors").is_file() and (ckpt[recipe] / "config.json").is_file()
        gate = load_controller(ckpt[recipe])
        assert (gate.contract["kind"], gate.contract["backend"]) == (kind, points[kind].manifest["backend"])

    # every arm on the test split, the gates loaded from their exports
    cache = tmp_path / "eval-cache"
    out = cli("trainers.evaluate", *policy_args, "logger=none", f"agent.call_format={CALL_FORMAT}",
              "agent.max_rounds=3", f"agent.max_new_tokens={MAX_NEW_TOKENS}", "arms.modes=[default]",
              "arms.probe_prefill.styles=[hard]", "arms.probe_prefill.taus=[calibrated]", "arms.toolgate.taus=[calibrated]",
              "bootstrap.replicates=200", f"cache_dir={cache}",
              *(f"checkpoints.{r}={p}" for r, p in ckpt.items()), f"hydra.run.dir={tmp_path / 'eval'}")
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    arms = set(results["arms"])
    assert {"default", "cascade"} <= arms, arms
    assert {a.split("@")[0] for a in arms} >= {"probe_hard", "toolgate", "g_step"}, arms
    assert results["tasks"] == 3 and f"arms={len(arms)} tasks=3" in out
    for arm in arms:
        assert arm in out, f"{arm} missing from the printed report"
    assert {k: Path(v["checkpoint"]) for k, v in results["controllers"].items()} == {
        "probe": ckpt["probe_prefill"], "toolgate": ckpt["toolgate"], "g_step": ckpt["g_step"]}

    # the default arm's calls ran on the server: its answer is in every trajectory, and the solved task is right
    default = [t for f in sorted(cache.glob("*/default-*/*.jsonl")) for t in read_trajectories(f)]
    assert sorted(str(t.task_id) for t in default) == ["j3", "x4", "x5"]
    for traj in default:
        assert [(c.name, c.args, c.status, c.result) for c in traj.calls] == [
            (CALL[0], CALL[1], "executed", {"success": True, "result": SERVER_ANSWER})]
        assert traj.correct == (str(traj.task_id) in SOLVED)
