"""Learn from your traffic, end to end, as a team would run it: an openai-agents agent in front of the gated endpoint
in shadow mode -> capture -> gold-free labels -> refit -> shadow report -> promote -> enforce.

    python benchmarks/learn_from_traffic.py --limit 60 --work outputs/learn_from_traffic

1. ``python -m runtime.serve upstream=local`` (the embedded policy) with the committed reference ToolGate and
   G-STEP behind ``<work>/serving/<gate>`` (symlinks, what promote repoints) in shadow mode, capture on.
2. An openai-agents agent (``Runner.run``; the task's tools as ``FunctionTool`` s that run the task's environment
   client-side) answers ``--limit`` train and test tasks of ``--tasks`` (the opening the policy was tuned on: the
   loop's system prompt and default response policy). Each answer is scored against gold here only for the figures
   below: nothing downstream reads gold.
3. ``python -m trainers.fit recipe=<gate> source=capture capture.dir=<work>/capture`` for each gate: the captured
   moments replayed on the policy, labelled without gold, a candidate fitted.
4. ``python -m trainers.evaluate.shadow``: what enforcing the serving gates would have done, accuracy estimated
   from the gold-free labels.
5. ``python -m trainers.evaluate.promote ... reload.endpoint=... reload.enforce=true`` per gate: a candidate no
   worse than the serving gate on the held-out captured conversations is installed and the endpoint reloads with
   the gate enforcing; a refused one leaves the serving gate, which is then switched to enforce by a reload.
6. The agent answers the same test tasks again with the gates enforcing: accuracy and tool calls against the
   shadow pass (the ungated responses), paired over tasks with bootstrap intervals — the measured effect beside the
   shadow report's estimate.

Prints each command, the report, and a last line ``shadow_acc=… enforce_acc=… acc_delta=… calls_delta=…
est_acc_change=…``; everything lands in ``<work>/summary.json``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from data_builders.agent import prompts as P  # noqa: E402
from data_builders.environments import make_environment  # noqa: E402
from data_builders.environments.base import serialize  # noqa: E402
from data_builders.gates import gates_at  # noqa: E402
from data_builders.tasks import tasks_from_config  # noqa: E402
from data_builders.tasks.scorers import score_task  # noqa: E402
from recipes import compose  # noqa: E402
from runtime.serve.testing import wait_healthy  # noqa: E402
from trainers.intervals import mean_interval, paired_difference_interval  # noqa: E402

#: the gates an HTTP client's traffic exercises: the registry's first at a proposed call and at an answer
GATES = tuple(gates_at(moment)[0].name for moment in ("pre_call", "on_answer"))
ADMIN_KEY = "learn-from-traffic"


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    print("$ " + " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], cwd=REPO, **kw)


class Endpoint:
    def __init__(self, work: Path, port: int):
        self.work, self.port, self.url = work, port, f"http://127.0.0.1:{port}"

    def __enter__(self) -> "Endpoint":
        cmd = [sys.executable, "-m", "runtime.serve", "upstream=local", f"port={self.port}",
               f"capture.dir={self.work / 'capture'}", f"hydra.run.dir={self.work / 'serve'}",
               *(f"gates.{g}={self.work / 'serving' / g}" for g in GATES),
               *(f"gates.modes.{g}=shadow" for g in GATES)]
        print("$ " + " ".join(cmd), flush=True)
        self.log = open(self.work / "serve.log", "w")
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "TOOLWISE_ADMIN_KEY": ADMIN_KEY})
        try:
            wait_healthy(self.proc, self.url, timeout_s=300)
        except RuntimeError as e:
            raise SystemExit(f"{e}\n{(self.work / 'serve.log').read_text()[-3000:]}") from None
        self.model = httpx.get(f"{self.url}/v1/models").json()["data"][0]["id"]
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()


async def agent_pass(ep: Endpoint, tasks, concurrency: int) -> list[dict]:
    """Each task through an openai-agents agent: its final output scored (here only), its tool calls counted."""
    import openai
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from agents.tool import FunctionTool

    set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=f"{ep.url}/v1", api_key="unused-on-loopback", max_retries=2)
    model = OpenAIChatCompletionsModel(model=ep.model, openai_client=client)
    gate = asyncio.Semaphore(concurrency)

    def tools_of(env):
        def make(spec):
            name = spec["function"]["name"]

            async def invoke(_ctx, args: str) -> str:
                try:
                    arguments = json.loads(args or "{}")
                except ValueError:
                    arguments = {}
                return serialize(env.call(name, arguments))
            return FunctionTool(name=name, description=spec["function"].get("description", ""),
                                params_json_schema=spec["function"].get("parameters") or {"type": "object"},
                                on_invoke_tool=invoke, strict_json_schema=False)
        return [make(s) for s in env.tool_specs()]

    async def one(task) -> dict:
        async with gate:
            env = make_environment(task.env)
            system, *rest = P.initial_messages(task.instruction, task.env.name, "default", False, "xml")
            agent = Agent(name="solver", instructions=system["content"], tools=tools_of(env), model=model,
                          model_settings=ModelSettings(max_tokens=192, temperature=0.0))
            try:
                result = await Runner.run(agent, [m for m in rest], max_turns=6)
                output, calls = str(result.final_output or ""), sum(i.type == "tool_call_item" for i in result.new_items)
                error = None
            except Exception as e:  # noqa: BLE001 - an agent that fails (max turns, a bad call) answered nothing
                output, calls, error = "", 0, f"{type(e).__name__}: {e}"[:200]
            return {"task": str(task.id), "split": task.split, "correct": bool(score_task(task, output)),
                    "calls": calls, "error": error}

    return await asyncio.gather(*(one(t) for t in tasks))


def reload(ep: Endpoint, body: dict) -> dict:
    r = httpx.post(f"{ep.url}/admin/reload", json=body, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=300)
    r.raise_for_status()
    return r.json()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="trivial_mix")
    ap.add_argument("--limit", type=int, default=60, help="tasks per split (train, test)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--port", type=int, default=8391)
    ap.add_argument("--work", default="outputs/learn_from_traffic")
    args = ap.parse_args()
    work = (REPO / args.work).resolve()
    shutil.rmtree(work, ignore_errors=True)
    (work / "serving").mkdir(parents=True)
    for g in GATES:
        (work / "serving" / g).symlink_to(REPO / "checkpoints" / g / "reference", target_is_directory=True)
    cfg = compose("build", [f"tasks={args.tasks}", f"limit={args.limit}"])
    train, test = tasks_from_config(cfg, "train"), tasks_from_config(cfg, "test")
    summary: dict = {"tasks": args.tasks, "train": len(train), "test": len(test)}
    with Endpoint(work, args.port) as ep:
        start = time.perf_counter()
        shadow = asyncio.run(agent_pass(ep, train + test, args.concurrency))
        summary["shadow_pass_s"] = round(time.perf_counter() - start, 1)
        (work / "shadow_pass.json").write_text(json.dumps(shadow, indent=2))
        print(f"shadow pass: {len(shadow)} episodes in {summary['shadow_pass_s']} s, accuracy "
              f"{sum(r['correct'] for r in shadow) / len(shadow):.3f}, calls {sum(r['calls'] for r in shadow)}")
        fits = {}
        for g in GATES:
            export = work / "fits" / g
            sh([sys.executable, "-m", "trainers.fit", f"recipe={g}", "source=capture",
                f"capture.dir={work / 'capture'}", f"recipe.export_dir={export}", "logger=none",
                f"hydra.run.dir={work / 'hydra' / ('fit-' + g)}"], check=True)
            fits[g] = json.loads((export / "metrics.json").read_text())
        points = {g: fits[g]["dataset"] for g in GATES}
        sh([sys.executable, "-m", "trainers.evaluate.shadow", f"capture.dir={work / 'capture'}", "logger=none",
            *(f"labels.{g}={points[g]}" for g in GATES), f"out_dir={work / 'shadow_report'}",
            f"hydra.run.dir={work / 'hydra' / 'shadow'}"], check=True)
        report = json.loads((work / "shadow_report" / "shadow_report.json").read_text())
        summary["shadow_report"] = report["gates"]
        summary["promote"] = {}
        for g in GATES:
            done = sh([sys.executable, "-m", "trainers.evaluate.promote", f"gate={g}", f"candidate={work / 'fits' / g}",
                       f"serving={work / 'serving' / g}", f"points={points[g]}", f"reload.endpoint={ep.url}",
                       "reload.enforce=true", f"out_dir={work / ('promote-' + g)}",
                       f"hydra.run.dir={work / 'hydra' / ('promote-' + g)}"],
                      env={**os.environ, "TOOLWISE_ADMIN_KEY": ADMIN_KEY})
            result = json.loads((work / f"promote-{g}" / "promote.json").read_text())
            summary["promote"][g] = {k: result[k] for k in ("accepted", "refused_because", "n", "serving", "candidate")}
            if done.returncode != 0:        # refused: the serving gate stays, and now enforces
                print(f"{g}: candidate refused; the serving gate enforces: {reload(ep, {'modes': {g: 'enforce'}})}")
        start = time.perf_counter()
        enforced = asyncio.run(agent_pass(ep, test, args.concurrency))
        summary["enforce_pass_s"] = round(time.perf_counter() - start, 1)
    shadow_test = [r for r in shadow if r["split"] == "test"]
    acc_s = [float(r["correct"]) for r in shadow_test]
    acc_e = [float(r["correct"]) for r in enforced]
    calls_s, calls_e = [float(r["calls"]) for r in shadow_test], [float(r["calls"]) for r in enforced]
    summary.update(
        shadow_test_accuracy=sum(acc_s) / len(acc_s), shadow_test_accuracy_ci=mean_interval(acc_s),
        enforce_test_accuracy=sum(acc_e) / len(acc_e), enforce_test_accuracy_ci=mean_interval(acc_e),
        accuracy_delta=sum(acc_e) / len(acc_e) - sum(acc_s) / len(acc_s),
        accuracy_delta_ci=paired_difference_interval(acc_e, acc_s),
        calls_shadow=sum(calls_s), calls_enforce=sum(calls_e), calls_delta_ci=paired_difference_interval(calls_e, calls_s),
        fits={g: {"test_auroc": fits[g]["splits"]["test"]["all"].get("auroc"), "points": fits[g]["points"]}
              for g in GATES},
        episodes_failed={"shadow": sum(r["error"] is not None for r in shadow),
                         "enforce": sum(r["error"] is not None for r in enforced)})
    (work / "summary.json").write_text(json.dumps({**summary, "episodes": {"shadow": shadow, "enforce": enforced}},
                                                  indent=2, default=list))
    print(json.dumps({k: v for k, v in summary.items() if k not in ("shadow_report", "promote")}, indent=2, default=list))
    for g in GATES:
        p = summary["promote"][g]
        print(f"promote {g}: {'accepted' if p['accepted'] else 'refused: ' + '; '.join(p['refused_because'])}")
    est = summary["shadow_report"].get(GATES[0], {}).get("acc_change")
    print(f"shadow_acc={summary['shadow_test_accuracy']:.3f} enforce_acc={summary['enforce_test_accuracy']:.3f} "
          f"acc_delta={summary['accuracy_delta']:+.3f} calls_delta={summary['calls_enforce'] - summary['calls_shadow']:+.0f} "
          f"est_acc_change={est}")


if __name__ == "__main__":
    main()
