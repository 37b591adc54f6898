"""Every ```bash and ```python block of the README and docs/guide.md runs as written, so a user's first paste works
and a refit, a renamed key or a moved checkpoint cannot silently break the docs.

What "runs" means per command (each stated here, nothing else is changed in a block):

* Python blocks run for real from the repository root, each in a fresh namespace (the README's gate snippet on
  the committed reference gates: it must print both decisions).
* A bash block that starts ``python -m runtime.serve`` runs in ``bash`` as written, with the ports moved to free
  ones and the Hydra run directory out of the checkout: an HTTP upstream is the scripted OpenAI-compatible server
  of ``runtime/serve/testing.py`` (a ``vllm serve`` line is replaced by it), ``upstream=local`` loads the embedded
  policy. The server keeps running for the Python blocks after it (the OpenAI client), as it would in a terminal.
* ``python -m <Hydra app> overrides…`` composes its config with those overrides and passes the schema's check
  (what ``--cfg job`` prints, plus the check each job runs before it starts). The fast ones also run, in one
  subprocess per page: rollout, build and oracle commands whose policy is on this machine (the embedded one, HF,
  local executor, built-in tasks) with :data:`TINY` added (rollout and build: one task, one short round; the
  oracle, seconds, as written), outputs in a temp dir.
  Fits, evaluations, the factorized comparison and sweeps compose only: minutes to hours each (the fits and the
  evaluator run on tiny data in tests/trainers).
* ``python -m trainers.sweep <spec>`` composes every point of the spec's grid; ``accelerate launch`` parses its
  flags with accelerate's own parser, loads its config file and composes the ``trainers.fit`` command;
  ``trl vllm-serve`` parses its flags with TRL's own arguments (no GPU here to serve on).
* ``pip install``: nothing is downloaded; the pins match what is installed and the extras exist in pyproject.toml.

A block preceded by ``<!-- not-run: <reason> -->`` is skipped with that reason (keep these few); a command this
test does not know how to check fails it, so a new kind of command in the docs comes with its check.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import inspect
import io
import itertools
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement

from tests.conftest import REPO

pytest.importorskip("fastapi")
pytest.importorskip("openai")

PAGES = ["README.md", "docs/guide.md"]
#: added to a rollout / build command that runs for real (one task per split, one short round)
TINY = {"data_builders.rollout": ["limit=1", "agent.max_rounds=1", "agent.max_new_tokens=8"],
        "data_builders.build": ["limit=1", "agent.max_rounds=1", "agent.max_new_tokens=8"],
        "data_builders.oracle": []}
#: what each of those writes (in its out_dir, else its run directory)
ARTIFACT = {"data_builders.rollout": "trajectories.jsonl", "data_builders.build": "manifest.json",
            "data_builders.oracle": "oracle_runs.jsonl"}
#: what the docs' servers are called in the blocks (the test moves them to free ports)
UPSTREAM, GATED = "127.0.0.1:8000", "127.0.0.1:8080"
UPSTREAM_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"   # the model name the blocks ask the upstream for
SERVER_START_S = 300     # loading the embedded policy + MiniLM on a busy 2-core machine


@dataclass
class Block:
    page: str
    line: int           # of the opening fence
    lang: str           # bash | python
    text: str
    not_run: str | None  # the reason of a <!-- not-run: ... --> marker right before it

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


_FENCE = re.compile(r"(?:<!--\s*not-run:\s*(?P<reason>.*?)\s*-->\s*\n)?^```(?P<lang>bash|python)\n(?P<text>.*?)\n```",
                    re.S | re.M)


def blocks(page: str, text: str | None = None) -> list[Block]:
    text = (REPO / page).read_text() if text is None else text
    return [Block(page, text.count("\n", 0, m.start("lang")) + 1, m["lang"], m["text"], m["reason"])
            for m in _FENCE.finditer(text)]


def logical_lines(bash: str) -> list[str]:
    """The block's command lines: continuations joined, blank and comment-only lines dropped."""
    lines = (ln.strip() for ln in bash.replace("\\\n", " ").splitlines())
    return [ln for ln in lines if ln and not ln.startswith("#")]


def commands(line: str) -> list[tuple[list[str], bool]]:
    """``(argv, background)`` of each command of a line (``a && b``, ``a; b``, ``a &``), comments dropped,
    ``$VARS`` expanded as the shell would (the test sets the ones the docs use)."""
    lexer = shlex.shlex(os.path.expandvars(line), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    out, argv = [], []
    for tok in lexer:
        if tok in ("&&", ";", "&"):
            out.append((argv, tok == "&"))
            argv = []
        elif tok in ("|", "||", "(", ")", "<", ">", ">>"):
            raise ValueError(f"{line!r}: pipes, subshells and redirections are left to the server blocks' bash")
        else:
            argv.append(tok)
    if argv:
        out.append((argv, False))
    return out


def without_env(argv: list[str]) -> tuple[dict, list[str]]:
    env = {}
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", argv[0]):
        k, v = argv[0].split("=", 1)
        env[k], argv = v, argv[1:]
    return env, argv


# ---------------------------------------------------------------------------------------------- the checks
#: ``python -m`` commands that are not Hydra apps; the docs run them on committed files, where they change nothing
PLAIN_COMMANDS = {"data_builders.migrate_fingerprints"}


def hydra_config_name(module: str) -> str:
    """The config a ``python -m <module>`` Hydra app composes (its ``@hydra.main(config_name=...)``)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"python -m {module}: no such module"
    entry = importlib.import_module(f"{module}.__main__" if spec.submodule_search_locations else module)
    main = getattr(entry, "main", None)
    closure = inspect.getclosurevars(main).nonlocals if callable(main) else {}
    # through wrappers outside hydra.main (functools.wraps: malloc.cli_opt_in) down to Hydra's own, not past it
    while callable(main) and "config_name" not in closure and hasattr(main, "__wrapped__"):
        main = main.__wrapped__
        closure = inspect.getclosurevars(main).nonlocals
    assert "config_name" in closure, f"python -m {module}: not a Hydra app (no @hydra.main main)"
    return closure["config_name"]


def compose(module: str, overrides: list[str]):
    import recipes

    return recipes.compose(hydra_config_name(module), overrides)


def runnable_here(module: str, cfg) -> str | None:
    """None when a rollout / build / oracle command can run here in seconds with :data:`TINY`, else why not."""
    from data_builders.backends.loading import EMBEDDED_ALIASES

    if module not in TINY:
        return "minutes to hours (compose only)"
    if cfg.get("model") is not None and cfg.model.name not in EMBEDDED_ALIASES:
        return f"policy {cfg.model.name} is not on this machine"
    if cfg.get("backend") is not None and cfg.backend.name != "hf":
        return f"backend {cfg.backend.name} (GPU)"
    if cfg.get("executor") is not None and cfg.executor.name != "local":
        return "executor=ray (tests/data_builders/test_executor.py runs it)"
    if cfg.tasks.source != "builtin":
        return f"tasks={cfg.tasks.source} reads files or the hub"
    if cfg.get("agent") is not None and cfg.agent.get("constrained_calls") and not importlib.util.find_spec("xgrammar"):
        return "agent.constrained_calls needs the constrained extra"
    return None


def check_pip(argv: list[str]) -> None:
    """``pip install …`` without installing: each pinned requirement is what this environment has, each named
    package is installed, each extra of ``-e .[extras]`` exists."""
    assert argv[:2] == ["pip", "install"], argv
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    args = iter(argv[2:])
    for arg in args:
        if arg == "--no-deps":
            continue
        if arg == "-e":
            target = next(args)
            m = re.fullmatch(r"\.(?:\[(.*)\])?", target)
            assert m, f"pip install -e {target}: the docs install this checkout"
            unknown = set(filter(None, (m[1] or "").split(","))) - set(extras)
            assert not unknown, f"pip install -e {target}: no such extra(s) {sorted(unknown)} in pyproject.toml"
            continue
        assert not arg.startswith("-"), f"pip install {arg}: an option this test does not know"
        req = Requirement(arg)
        installed = importlib.metadata.version(req.name)
        assert req.specifier.contains(installed, prereleases=True), f"{arg}: this environment has {installed}"


def check_accelerate(argv: list[str]) -> list[str]:
    """``accelerate launch …``: flags parsed by accelerate, the config file loaded; returns the launched command's
    ``-m module args`` for composing."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    args = launch_command_parser().parse_args(argv[2:])
    assert (REPO / args.config_file).is_file(), args.config_file
    load_config_from_file(str(REPO / args.config_file))
    assert args.module, f"{argv}: the docs launch a module (-m trainers.fit)"
    return ["-m", args.training_script, *args.training_script_args]


def check_trl_vllm_serve(argv: list[str]) -> None:
    from transformers import HfArgumentParser
    from trl.scripts.vllm_serve import ScriptArguments

    (parsed,) = HfArgumentParser(ScriptArguments).parse_args_into_dataclasses(argv[2:])
    assert parsed.model


def check_sweep(argv: list[str]) -> int:
    """Every point of the spec's grid composes as the ``trainers.fit`` job the sweep's multirun would launch."""
    from trainers import sweep

    recipe, *params = sweep.multirun_overrides(sweep.load_spec(REPO / argv[0]))
    axes = [[f"{k}={v}" for v in values.split(",")] for k, values in (p.split("=", 1) for p in params)]
    points = list(itertools.product(*axes))
    for point in points:
        compose("trainers.fit", [recipe, *point, *argv[1:]])
    return len(points)


@dataclass
class Page:
    """One page's blocks run in order, as a reader pastes them into one terminal and one Python prompt."""
    page: str
    tmp: Path
    upstream_port: int
    gated_port: int
    servers: list
    runs: list          # (module, argv) for the runner
    log: list

    def sub(self, text: str) -> str:
        return text.replace(UPSTREAM, f"127.0.0.1:{self.upstream_port}").replace(GATED, f"127.0.0.1:{self.gated_port}")

    # ------------------------------------------------------------------ python
    def python(self, block: Block) -> str:
        out = io.StringIO()
        code = compile(self.sub(block.text), block.where, "exec")
        with contextlib.redirect_stdout(out):
            exec(code, {"__name__": "__main__"})     # a fresh namespace: each block stands alone
        return out.getvalue()

    # ------------------------------------------------------------------ servers
    def stop_servers(self) -> None:
        """Stops every process a block started: the whole process group (bash, and the server it left running in
        the background after bash itself exited), waiting until none is left, so the next server gets the port."""
        for proc, _ in self.servers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        def running() -> bool:
            return self._port_open() or any(p.poll() is None for p, _ in self.servers)
        for escalate in (False, True):
            if escalate:
                for proc, _ in self.servers:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
            deadline = time.monotonic() + 20
            while self.servers and running() and time.monotonic() < deadline:
                time.sleep(0.1)
            if not (self.servers and running()):
                break
        else:
            raise AssertionError(f"a server of {self.page} still holds port {self.gated_port} after SIGKILL")
        self.servers.clear()

    def _port_open(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.gated_port)) == 0

    def server_block(self, block: Block) -> str:
        """Runs the block in bash; returns what it printed (a foreground server: once it answers /health)."""
        self.stop_servers()     # as a reader would, before reusing the port
        n = len(self.log)
        lines = [ln for ln in block.text.splitlines() if not ln.startswith("vllm serve ")]   # the scripted upstream
        script = self.sub("\n".join(lines))
        script = re.sub(r"\bport=8080\b", f"port={self.gated_port} hydra.run.dir={self.tmp}/serve-{n}", script)
        (self.tmp / f"block-{n}.sh").write_text("set -eu\n" + script + "\n")
        log = self.tmp / f"block-{n}.log"
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        env.pop("TOOLWISE_API_KEYS", None)
        proc = subprocess.Popen(["bash", str(self.tmp / f"block-{n}.sh")], cwd=REPO, env=env, stdout=log.open("w"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.servers.append((proc, log))
        last = logical_lines(block.text)[-1]
        foreground = "runtime.serve" in last and not last.endswith("&")     # the block ends serving
        deadline = time.monotonic() + SERVER_START_S
        if foreground:
            while not self.healthy():
                assert proc.poll() is None, f"{block.where}: the server exited ({proc.returncode}):\n{log.read_text()}"
                assert time.monotonic() < deadline, \
                    f"{block.where}: no /health after {SERVER_START_S} s:\n{log.read_text()}"
                time.sleep(0.5)
            return log.read_text()
        try:
            rc = proc.wait(timeout=SERVER_START_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{block.where}: still running after {SERVER_START_S} s:\n{log.read_text()}")
        assert rc == 0, f"{block.where}: exit {rc}:\n{log.read_text()}"
        return log.read_text()

    def healthy(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.gated_port}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    # ------------------------------------------------------------------ other commands
    def command(self, block: Block, argv: list[str]) -> str:
        _env, argv = without_env(argv)      # e.g. CUDA_VISIBLE_DEVICES: nothing here to place
        if argv[:2] == ["pip", "install"]:
            check_pip(argv)
            return "pip: pins and extras match"
        if argv[:2] == ["accelerate", "launch"]:
            argv = ["python", *check_accelerate(argv)]
        if argv[:2] == ["trl", "vllm-serve"]:
            check_trl_vllm_serve(argv)
            return "trl vllm-serve: flags parse"
        assert argv[:2] == ["python", "-m"] and len(argv) > 2, f"{block.where}: no check for {' '.join(argv)!r}"
        module, overrides = argv[2], argv[3:]
        if module == "trainers.sweep":
            return f"sweep: {check_sweep(overrides)} grid points compose"
        if module in PLAIN_COMMANDS:     # argparse commands the docs show on the repository's own files: run them
            proc = subprocess.run([sys.executable, "-m", module, *overrides], cwd=REPO, capture_output=True,
                                  text=True, timeout=120)
            assert proc.returncode == 0, f"{block.where}: exit {proc.returncode}:\n{proc.stderr[-3000:]}"
            return proc.stdout.strip()
        cfg = compose(module, overrides)
        why_not = runnable_here(module, cfg)
        if why_not is None:
            n = len(self.runs)
            extra = [*TINY[module], f"hydra.run.dir={self.tmp}/run-{n}"]
            if module == "data_builders.build":
                extra.append(f"out_dir={self.tmp}/points-{n}")
            self.runs.append((module, overrides + extra))
            return "composes; runs" + (" with " + " ".join(TINY[module]) if TINY[module] else " as written")
        return f"composes ({why_not})"

    def run_all(self) -> list[dict]:
        """The runnable commands, each as ``python -m`` would run it (runpy), in one interpreter."""
        if not self.runs:
            return []
        runner = ("import json, runpy, sys\n"
                  "for module, argv in json.loads(sys.argv[1]):\n"
                  "    sys.argv = [module, *argv]\n"
                  "    try:\n"
                  "        runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
                  "        rc = 0\n"
                  "    except SystemExit as e:\n"
                  "        rc = e.code if isinstance(e.code, int) else int(e.code is not None)\n"
                  "    print('@@ran ' + json.dumps({'module': module, 'argv': argv, 'rc': rc}), flush=True)\n")
        proc = subprocess.run([sys.executable, "-c", runner, json.dumps(self.runs)], cwd=REPO, capture_output=True,
                              text=True, timeout=600)
        ran = [json.loads(ln[5:]) for ln in proc.stdout.splitlines() if ln.startswith("@@ran ")]
        assert len(ran) == len(self.runs) and all(r["rc"] == 0 for r in ran), \
            f"{ran}\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
        return ran


@pytest.fixture
def gsm8k_file(tmp_path, monkeypatch):
    """``$GSM8K``, which the docs' GSM8K commands name: a two-line file in GSM8K's own format."""
    path = tmp_path / "gsm8k.jsonl"
    rows = [{"question": f"Ann has {a} apples and buys {b} more. How many now?",
             "answer": f"{a} + {b} = {a + b}\n#### {a + b}"} for a, b in [(3, 4), (5, 6)]]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    monkeypatch.setenv("GSM8K", str(path))
    return path


# ------------------------------------------------------------------------------------------------ the parser
def test_blocks_commands_and_markers_are_read_as_a_shell_reads_them():
    text = ("x\n```bash\npython -m a k=1 \\\n    j=2   # why\n# a comment line\n"
            "pip install --no-deps p && python -m b &\n```\n<!-- not-run: needs a GPU -->\n```python\nprint(1)\n```\n"
            "```json\n{}\n```\n")
    got = blocks("README.md", text)
    assert [(b.line, b.lang, b.not_run) for b in got] == [(2, "bash", None), (9, "python", "needs a GPU")]
    assert logical_lines(got[0].text) == ["python -m a k=1      j=2   # why",
                                          "pip install --no-deps p && python -m b &"]
    assert commands(logical_lines(got[0].text)[0]) == [(["python", "-m", "a", "k=1", "j=2"], False)]
    assert commands(logical_lines(got[0].text)[1]) == [(["pip", "install", "--no-deps", "p"], False),
                                                       (["python", "-m", "b"], True)]
    assert without_env(["CUDA_VISIBLE_DEVICES=0,1", "trl", "x"]) == ({"CUDA_VISIBLE_DEVICES": "0,1"}, ["trl", "x"])


def test_a_command_without_a_check_fails(tmp_path):
    page = Page("README.md", tmp_path, 1, 2, [], [], [])
    block = Block("README.md", 1, "bash", "make all", None)
    with pytest.raises(AssertionError, match="no check for 'make all'"):
        page.command(block, ["make", "all"])
    with pytest.raises(AssertionError, match="not a Hydra app"):
        compose("trainers.sweep", [])
    with pytest.raises(AssertionError, match="no such extra"):
        check_pip(["pip", "install", "-e", ".[nope]"])
    with pytest.raises(Exception, match="agent.max_roundz"):   # a misspelt key fails as on the command line
        compose("data_builders.rollout", ["agent.max_roundz=2"])


def test_the_not_run_list_is_short_and_says_why():
    skipped = [b for page in PAGES for b in blocks(page) if b.not_run is not None]
    assert len(skipped) <= 2 and all(len(b.not_run) > 10 for b in skipped), [(b.where, b.not_run) for b in skipped]


# ------------------------------------------------------------------------------------------------ the pages
@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_every_block_runs(page, tmp_path, monkeypatch, gsm8k_file):
    from runtime.serve.testing import ScriptedUpstream, free_port, serve_in_thread

    monkeypatch.chdir(REPO)                  # the docs' paths are relative to the repository root
    monkeypatch.delenv("TOOLWISE_API_KEYS", raising=False)
    found = blocks(page)
    assert found, page
    upstream = ScriptedUpstream(model=UPSTREAM_MODEL)
    with serve_in_thread(upstream.app) as upstream_url:
        run = Page(page, tmp_path, int(upstream_url.rsplit(":", 1)[1]), free_port(), [], [], [])
        try:
            for block in found:
                if block.not_run is not None:
                    run.log.append((block.where, f"not run: {block.not_run}"))
                elif block.lang == "python":
                    printed = run.python(block)
                    assert printed.strip(), f"{block.where}: printed nothing"
                    run.log.append((block.where, printed))
                elif "python -m runtime.serve" in block.text:
                    printed = run.server_block(block)
                    if '"messages"' in block.text:     # it asked the server something: the answer carries decisions
                        assert '"toolwise"' in printed and '"decisions"' in printed, f"{block.where}:\n{printed}"
                    else:                            # a server alone: ask it one question
                        printed = ask_gated(run.gated_port)
                    run.log.append((block.where, printed))
                else:
                    for line in logical_lines(block.text):
                        for argv, _ in commands(line):
                            run.log.append((block.where, f"{' '.join(argv)}: {run.command(block, argv)}"))
            ran = run.run_all()
        finally:
            run.stop_servers()
    report = "\n".join(f"{w}: {s.strip()[:300]}" for w, s in run.log)
    print(report)
    for r in ran:          # each real run wrote what it is for
        dirs = dict(a.split("=", 1) for a in r["argv"] if a.startswith(("out_dir=", "hydra.run.dir=")))
        artifact = Path(dirs.get("out_dir", dirs["hydra.run.dir"])) / ARTIFACT[r["module"]]
        assert artifact.is_file() and artifact.stat().st_size > 0, r
    if page == "README.md":
        decisions = [s for w, s in run.log if "GateDecision(" in s]
        assert decisions and "gate='toolgate'" in decisions[0] and "gate='g_step'" in decisions[0], report
        assert len(ran) >= 3, ran      # the Recipes block's rollout, build and oracle


def ask_gated(port: int) -> str:
    """One chat turn with tools through a server a block started (an ``upstream=local`` policy: 16 new tokens)."""
    tools = [{"type": "function", "function": {"name": "evaluate_expression", "parameters": {
        "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]
    r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=120,
                   json={"model": UPSTREAM_MODEL, "tools": tools, "max_tokens": 16,
                         "messages": [{"role": "user", "content": "What is 17*23?"}]})
    assert r.status_code == 200, r.text
    decisions = r.json()["toolwise"]["decisions"]
    assert decisions and decisions[0]["gate"] == "probe_prefill", decisions
    return json.dumps(decisions)
