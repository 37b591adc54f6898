"""Run the agent on tasks and write trajectories.

    python -m data_builders.rollout tasks=builtin mode=force limit=32 [model=smollm2_base] [backend=vllm|openai]

Writes ``trajectories.jsonl`` and ``summary.json`` to the Hydra run directory, prints a table per
environment x difficulty, and ends with one line of key=value figures. While it runs, each finished episode is
appended to ``trajectories.partial.jsonl`` (removed on success), so a failure or a kill keeps the finished ones.
"""
from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

import data_builders.config  # noqa: F401 - its schemas, stored before Hydra composes
from recipes import CONFIG_DIR

from .agent.loop import Agent, AgentConfig
from .agent.trajectory import Trajectory, summarize, write_trajectories
from .backends import malloc
from .environments.isolation import announce as announce_sandbox
from .backends.loading import backend_from_config
from .executors import executor_from_config, spread
from .progress import BudgetBar
from .tasks import tasks_from_config


def summary_table(trajs: list[Trajectory]) -> str:
    cells: dict[tuple[str, str], list[Trajectory]] = defaultdict(list)
    for t in trajs:
        cells[(t.env, t.difficulty)].append(t)
    order = {"easy": 0, "medium": 1, "hard": 2}
    rows = [f"{'environment':<22}{'difficulty':<11}{'n':>4}{'acc':>7}{'calls/task':>12}{'fmt err':>9}{'tokens':>8}"]
    for (env, diff) in sorted(cells, key=lambda k: (k[0], order.get(k[1], 9))):
        s = summarize(cells[(env, diff)])
        rows.append(f"{env:<22}{diff:<11}{s['tasks']:>4}{s['accuracy']:>7.3f}{s['tool_calls_per_task']:>12.2f}"
                    f"{s['format_error_rate']:>9.3f}{s['tokens_per_task']:>8.1f}")
    return "\n".join(rows)


def rollout_shard(engine, shard: tuple, progress) -> list[Trajectory]:
    """One shard's episodes, ``(agent settings, tasks)`` on ``engine``, in task order; ``progress`` gets each as it
    finishes."""
    agent_cfg, tasks = shard
    return Agent(engine, agent_cfg).run(tasks, on_done=progress)


def run(cfg: DictConfig) -> dict:
    out_dir = Path(cfg.out_dir)
    announce_sandbox(cfg)
    # Tasks and agent settings are checked before the model loads: a typo must not cost a model load.
    tasks = tasks_from_config(cfg)
    agent_cfg = AgentConfig(mode=cfg.mode, reasoning=cfg.reasoning, **OmegaConf.to_container(cfg.agent))
    executor_cfg = cfg.get("executor")
    path, partial = out_dir / "trajectories.jsonl", out_dir / "trajectories.partial.jsonl"
    out_dir.mkdir(parents=True, exist_ok=True)
    with executor_from_config(executor_cfg, cfg.model, cfg.get("backend"), backend_from_config) as executor:
        # local: one shard, the whole task list in one batched agent (today's run); ray: spread over the workers
        shards = [tasks] if executor.name == "local" else \
            spread(tasks, executor_cfg.workers, executor_cfg.shard_size)
        t0 = time.perf_counter()
        done = 0
        results: dict[int, list[Trajectory]] = {}
        # Each episode is appended as it finishes (completion order; with Ray, as its shard returns), so a failure
        # or a kill later in the run keeps every finished one; a separate file, so a failed rerun never truncates
        # an earlier run's trajectories.jsonl.
        # the bar counts generated tokens (data_builders/progress.py), finished tasks in its postfix
        with partial.open("w", encoding="utf-8") as sink, \
                BudgetBar(f"rollout {agent_cfg.mode}", {i: len(sh) for i, sh in enumerate(shards)}) as bar:
            def finished(_shard: int, traj: Trajectory) -> None:
                nonlocal done
                sink.write(json.dumps(traj.to_dict(), ensure_ascii=False) + "\n")
                sink.flush()
                done += 1
            try:
                for i, trajs in executor.map(rollout_shard, [(i, (agent_cfg, s)) for i, s in enumerate(shards)],
                                             on_progress=finished, on_tick=bar.tick, on_work=bar.work):
                    results[i] = trajs
            except BaseException:
                print(f"rollout failed: the {done} of {len(tasks)} episodes that finished are in {partial}",
                      file=sys.stderr)
                raise
        trajs = [t for i in range(len(shards)) for t in results[i]]
        fingerprint, engine = executor.info.fingerprint, executor.info.name
    wall = time.perf_counter() - t0
    write_trajectories(path, trajs)     # task order
    partial.unlink()
    summary = {**summarize(trajs), "wall_s": round(wall, 2), "policy": fingerprint, "backend": engine, "mode": agent_cfg.mode,
               "reasoning": agent_cfg.reasoning, "config": OmegaConf.to_container(cfg, resolve=True)}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(summary_table(trajs))
    if summary["context_exceeded"]:
        print(f"{summary['context_exceeded']} of {len(trajs)} episodes ended [CONTEXT_LENGTH_EXCEEDED] (scored wrong), "
              f"{summary['context_exceeded_before_generating']} before generating anything: their prompt leaves no "
              f"room for max_new_tokens={agent_cfg.max_new_tokens} in the context")
    print(f"trajectories: {path}")
    print(f"accuracy={summary['accuracy']:.4f} tool_calls_per_task={summary['tool_calls_per_task']:.3f} "
          f"format_error_rate={summary['format_error_rate']:.4f} tokens_per_task={summary['tokens_per_task']:.1f} "
          f"tasks={summary['tasks']}")
    return summary


@malloc.cli_opt_in   # this process is the job's: CPU backends may tune malloc (data_builders/backends/malloc.py)
@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="rollout")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
