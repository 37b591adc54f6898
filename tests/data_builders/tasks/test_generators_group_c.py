"""Built-in generators for CodeExecutor, Schedule and RegexMatch: When2Tool wording and gold formats,
determinism, split hygiene, content spread, and gold re-derived outside the generators."""
from __future__ import annotations

import ast
import collections
import json
import re

import pytest

from data_builders.environments.regex_match import RegexMatchEnv
from data_builders.environments.sandbox import SandboxLimits, run_python
from data_builders.environments.schedule import ScheduleEnv
from data_builders.tasks.builtin import generate_builtin
from data_builders.tasks.generators import GENERATORS
from data_builders.tasks.schema import DIFFICULTIES
from tests.conftest import SHARED

DATA = SHARED / "data" / "when2tool"
ENVS = ("CodeExecutorEnv", "ScheduleEnv", "RegexMatchEnv")
TAGS = {"CodeExecutorEnv": "code_executor", "ScheduleEnv": "schedule", "RegexMatchEnv": "regex_match"}
TOOLS = {"CodeExecutorEnv": ["run_code"], "ScheduleEnv": ["find_free_slots", "check_conflict"],
         "RegexMatchEnv": ["regex_match"]}
N = 40

# When2Tool's instruction templates, per environment (checked against the real files below).
CODE_RE = re.compile(r"\AWhat is the exact output of this Python code\?\n```\n(.+)\n```\n"
                     r"Answer with only the output, nothing else\.\Z", re.S)
_M = r"(\[\['\d\d:\d\d', '\d\d:\d\d'\](?:, \['\d\d:\d\d', '\d\d:\d\d'\])*\])"
SCHEDULE_RE = {
    "overlap": re.compile(rf"\ADo any of these meetings overlap\? {_M}\. Answer with only true or false\.\Z"),
    "count": re.compile(rf"\AGiven these meetings: {_M}\. How many free (1-hour|\d+-minute) slots are available "
                        r"between (\d\d:\d\d) and (\d\d:\d\d)\? Answer with only the number\.\Z"),
    "list": re.compile(rf"\AGiven these meetings: {_M}\. List all free slots of at least (\d+) minutes between "
                       r"(\d\d:\d\d) and (\d\d:\d\d)\. Answer with a list of \[start, end\] pairs in HH:MM format\.\Z"),
}
REGEX_RE = {
    "easy_findall": re.compile(r"\AWhat does the regex pattern r'(.*?)' find in the text \"(.*)\" using findall\? "
                               r"Answer with only the Python list\.\Z", re.S),
    "easy_search": re.compile(r"\AWhat does the regex pattern r'(.*?)' match \(search\) in \"(.*)\"\? "
                              r"Answer with only the matched string\.\Z", re.S),
    "findall": re.compile(r"\AWhat does re\.findall\(r'(.*?)', \"(.*)\"\) return\? "
                          r"Answer with only the Python list\.\Z", re.S),
}


@pytest.fixture(scope="module")
def tasks():
    return {split: generate_builtin(split, n_per_cell=N, envs=list(ENVS)) for split in ("train", "test")}


def cell(ts, env, difficulty):
    return [t for t in ts if t.env.name == env and t.difficulty == difficulty]


def run_snippets(codes: list[str]) -> list[str]:
    """The stdout of each snippet, all run in one sandboxed interpreter (one start-up instead of one
    per snippet), each with fresh globals, under the When2Tool harness's int->str limit."""
    program = ("import contextlib, io, json, sys\nsys.set_int_max_str_digits(10000)\nouts = []\n"
               f"for code in {codes!r}:\n    buf = io.StringIO()\n    with contextlib.redirect_stdout(buf):\n"
               "        exec(code, {'__name__': '__main__'})\n    outs.append(buf.getvalue())\n"
               "print(json.dumps(outs))\n")
    result = run_python(program, SandboxLimits(wall_s=30, cpu_s=30))
    assert result.error_kind is None, result
    return json.loads(result.stdout)


def kind_of(env: str, instruction: str) -> str:
    table = {"CodeExecutorEnv": {"code": CODE_RE}, "ScheduleEnv": SCHEDULE_RE, "RegexMatchEnv": REGEX_RE}[env]
    kinds = [k for k, pattern in table.items() if pattern.match(instruction)]
    assert len(kinds) == 1, (env, instruction)
    return kinds[0]


# --------------------------------------------------------------------------- contract


def test_registered_with_when2tool_tags_and_tools(tasks):
    for env in ENVS:
        gen = GENERATORS[env]
        assert gen.tag == TAGS[env]
        for difficulty in DIFFICULTIES:
            assert list(gen.tools(difficulty)) == TOOLS[env]
    for t in tasks["train"] + tasks["test"]:
        assert list(t.env.tools) == TOOLS[t.env.name] and t.env.parameters == {}
        assert list(t.tags) == [TAGS[t.env.name], "single_round"] and not t.multi_step


def test_tools_match_the_when2tool_files():
    path = DATA / "tasks_v1_test.json"
    if not path.is_file():
        pytest.skip(f"When2Tool data not available at {path}")
    seen = {}
    for rec in json.loads(path.read_text(encoding="utf-8")):
        env = rec["environments"][0]
        if env["name"] in ENVS:
            seen.setdefault((env["name"], rec["difficulty"]), set()).add(tuple(env["tools"]))
    assert len(seen) == 9
    for (env, difficulty), tool_lists in seen.items():
        assert tool_lists == {tuple(GENERATORS[env].tools(difficulty))}, (env, difficulty)


def test_wording_matches_the_when2tool_files(tasks):
    """Every When2Tool task of these environments fits one of the templates above, and so does every
    generated one; the kinds of question asked per difficulty are the same."""
    path = DATA / "tasks_v1_test.json"
    if not path.is_file():
        pytest.skip(f"When2Tool data not available at {path}")
    real, ours = collections.defaultdict(set), collections.defaultdict(set)
    for rec in json.loads(path.read_text(encoding="utf-8")):
        env = rec["environments"][0]["name"]
        if env in ENVS:
            real[env, rec["difficulty"]].add(kind_of(env, rec["instruction"]))
    for t in tasks["test"]:
        ours[t.env.name, t.difficulty].add(kind_of(t.env.name, t.instruction))
    assert ours == real


def test_deterministic_and_seeded(tasks):
    again = generate_builtin("train", n_per_cell=N, envs=list(ENVS))
    assert [t.to_dict() for t in again] == [t.to_dict() for t in tasks["train"]]
    other = generate_builtin("train", n_per_cell=N, seed=1, envs=list(ENVS))
    assert [t.instruction for t in other] != [t.instruction for t in tasks["train"]]
    # a smaller request is a prefix of a larger one
    small = generate_builtin("train", n_per_cell=5, envs=["RegexMatchEnv"])
    for difficulty in DIFFICULTIES:
        assert [t.instruction for t in cell(small, "RegexMatchEnv", difficulty)] == \
            [t.instruction for t in cell(tasks["train"], "RegexMatchEnv", difficulty)][:5]


def test_train_and_test_are_disjoint(tasks):
    train = {t.instruction for t in tasks["train"]}
    assert not train & {t.instruction for t in tasks["test"]}
    for seed in (1, 2):
        test = generate_builtin("test", n_per_cell=N, seed=seed, envs=list(ENVS))
        assert not train & {t.instruction for t in test}
    for split, ts in tasks.items():
        assert len({t.instruction for t in ts}) == len(ts), split


# --------------------------------------------------------------------------- content and gold formats


def test_code_executor_content_and_format(tasks):
    for difficulty in DIFFICULTIES:
        ts = cell(tasks["test"], "CodeExecutorEnv", difficulty)
        codes = [CODE_RE.match(t.instruction).group(1) for t in ts]
        for t in ts:
            assert t.answer == t.answer.rstrip("\n") and t.answer != ""
        lines = [c.count("\n") + 1 for c in codes]
        if difficulty == "easy":
            assert max(lines) == 1  # one-liners
        if difficulty == "hard":
            assert min(lines) >= 3 and any("def " in c for c in codes) and any("dp" in c for c in codes)
        # several different snippet families per cell
        assert len({re.sub(r"[\d'\[\]]+", "", c)[:25] for c in codes}) >= 6, difficulty


def test_code_executor_gold_is_the_real_stdout():
    """Run a sample of generated snippets for real (in one sandboxed interpreter, each with fresh
    globals and its own captured stdout) and compare with the generators' gold."""
    ts = generate_builtin("test", n_per_cell=60, envs=["CodeExecutorEnv"]) + \
        generate_builtin("train", n_per_cell=60, seed=3, envs=["CodeExecutorEnv"])
    codes = [CODE_RE.match(t.instruction).group(1) for t in ts]
    outs = run_snippets(codes)
    mismatches = [(c, t.answer, o) for c, t, o in zip(codes, ts, outs) if o.rstrip("\n") != t.answer]
    assert not mismatches, mismatches[:3]


def _minutes(hhmm: str) -> int:
    return int(hhmm[:2]) * 60 + int(hhmm[3:])


def test_schedule_content_gold_formats_and_env_agreement(tasks):
    counts = {"easy": (2, 3), "medium": (4, 7), "hard": (6, 11)}
    windows = {"easy": ("09:00", "17:00"), "medium": ("09:00", "17:00"), "hard": ("08:00", "20:00")}
    env = ScheduleEnv()
    for t in tasks["train"] + tasks["test"]:
        if t.env.name != "ScheduleEnv":
            continue
        kind = kind_of("ScheduleEnv", t.instruction)
        m = SCHEDULE_RE[kind].match(t.instruction)
        meetings = ast.literal_eval(m.group(1))
        lo, hi = counts[t.difficulty]
        assert lo <= len(meetings) <= hi
        spans = [(_minutes(s), _minutes(e)) for s, e in meetings]
        start, end = (_minutes(x) for x in windows[t.difficulty])
        assert all(start <= s < e <= end for s, e in spans)
        assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))  # back to back, never overlapping
        if kind == "overlap":
            assert t.difficulty == "easy" and t.answer == "False"
            assert str(env.call("check_conflict", {"intervals": meetings})["result"]["has_conflict"]) == t.answer
            continue
        minutes = {"1-hour": 60}.get(m.group(2)) or int(m.group(2).split("-")[0])
        out = env.call("find_free_slots", {"busy": meetings, "day_start": m.group(3), "day_end": m.group(4),
                                           "min_duration": minutes})
        if kind == "count":
            assert t.answer.isdigit() and int(t.answer) == len(out["result"])
        else:
            gold = ast.literal_eval(t.answer)
            assert all(re.fullmatch(r"\d\d:\d\d", x) for pair in gold for x in pair)
            assert gold == out["result"] and t.answer == str(out["result"])
    kinds = collections.Counter((t.difficulty, kind_of("ScheduleEnv", t.instruction))
                                for t in tasks["test"] if t.env.name == "ScheduleEnv")
    assert {k for k, _ in kinds} == set(DIFFICULTIES) and ("medium", "list") in kinds and ("easy", "overlap") in kinds
    assert len({kind_of("ScheduleEnv", t.instruction) + t.instruction.split("slots")[0][-12:]
                for t in tasks["test"] if t.env.name == "ScheduleEnv" and t.difficulty == "hard"}) == 3


def test_regex_gold_formats_and_env_agreement(tasks):
    env = RegexMatchEnv()
    patterns = collections.defaultdict(set)
    for t in tasks["train"] + tasks["test"]:
        if t.env.name != "RegexMatchEnv":
            continue
        kind = kind_of("RegexMatchEnv", t.instruction)
        assert (kind == "findall") == (t.difficulty != "easy")
        pattern, text = REGEX_RE[kind].match(t.instruction).groups()
        patterns[t.difficulty].add(pattern)
        if kind == "easy_search":
            assert t.answer == re.search(pattern, text).group(0)
            out = env.call("regex_match", {"pattern": pattern, "text": text, "operation": "search"})
            assert out["result"] == t.answer
            continue
        gold = ast.literal_eval(t.answer)
        assert isinstance(gold, list) and t.answer == str(re.findall(pattern, text))
        assert str(env.call("regex_match", {"pattern": pattern, "text": text})["result"]) == t.answer
        if t.difficulty == "hard":
            assert len(text) >= 40 and len(gold) >= 3
    assert len(patterns["easy"]) >= 8 and len(patterns["medium"]) >= 8 and len(patterns["hard"]) == 4
    assert any("(" in p and "(?" not in p for p in patterns["medium"])  # capture groups -> tuples
    assert any("(?=" in p or "(?<=" in p for p in patterns["medium"])  # lookarounds


# --------------------------------------------------------------------------- CodeExecutor multi-hop

MULTIHOP_RE = re.compile(r"\AThree-step code execution: Step 1: Run the following code\. Call the result x\.\n"
                         r"```\n(.+)\n```\nStep 2: Using x, run: (.+)\. Call the result y\.\n"
                         r"Step 3: Using y, run: (.+)\. Call the result z\.\nReturn only z\.\Z", re.S)


def _shape(description: str) -> str:
    return re.sub(r"\d+", "N", re.sub(r"\[[-\d, ]*\]", "[L]", description))


@pytest.fixture(scope="module")
def multihop():
    from data_builders.tasks.builtin import generate_multihop

    return {split: generate_multihop(split, n_per_cell=20) for split in ("train", "test")}


def test_multihop_schema_determinism_and_splits(multihop):
    from data_builders.tasks.builtin import generate_multihop

    for split, ts in multihop.items():
        assert [t.difficulty for t in ts] == [d for d in DIFFICULTIES for _ in range(20)]
        for t in ts:
            assert t.multi_step and list(t.tags) == ["code_executor", "multihop_3step"] and t.split == split
            assert list(t.env.tools) == ["run_code"] and t.expected_steps == 3
            assert t.answer == t.expected["steps"][-1] and MULTIHOP_RE.match(t.instruction)
    assert [t.to_dict() for t in generate_multihop("train", n_per_cell=20)] == [t.to_dict() for t in multihop["train"]]
    assert not {t.instruction for t in multihop["train"]} & {t.instruction for t in multihop["test"]}
    assert {t.instruction for t in generate_multihop("train", n_per_cell=20, seed=1)} != \
        {t.instruction for t in multihop["train"]}


def test_multihop_step_templates_are_when2tools(multihop):
    path = DATA / "tasks_v1_multihop_test.json"
    if not path.is_file():
        pytest.skip(f"When2Tool data not available at {path}")
    real = collections.defaultdict(set)
    for rec in json.loads(path.read_text(encoding="utf-8")):
        if rec["environments"][0]["name"] == "CodeExecutorEnv":
            m = MULTIHOP_RE.match(rec["instruction"])
            real[rec["difficulty"]] |= {_shape(m.group(2)), _shape(m.group(3))}
    ours = collections.defaultdict(set)
    for t in multihop["train"] + multihop["test"]:
        m = MULTIHOP_RE.match(t.instruction)
        ours[t.difficulty] |= {_shape(m.group(2)), _shape(m.group(3))}
    for difficulty in DIFFICULTIES:
        assert ours[difficulty] <= real[difficulty], ours[difficulty] - real[difficulty]
        assert len(ours[difficulty]) >= len(real[difficulty]) // 2


def test_multihop_steps_are_what_the_described_code_prints(multihop):
    """Each step run for real: step 1 verbatim, steps 2-3 as the oracle's code for the description."""
    from data_builders.oracle.solvers.code_executor import step_code

    codes, want = [], []
    for t in multihop["train"] + multihop["test"]:
        code, step2, step3 = MULTIHOP_RE.match(t.instruction).groups()
        x, y, z = t.expected["steps"]
        codes += [code, step_code(step2, "x", x), step_code(step3, "y", y)]
        want += [x, y, z]
    mismatches = [(c, w, o) for c, w, o in zip(codes, want, run_snippets(codes)) if o.rstrip("\n") != w]
    assert not mismatches, mismatches[:3]


def test_multihop_oracle_end_to_end(multihop):
    from data_builders.oracle import run_oracle

    for difficulty in DIFFICULTIES:
        task = next(t for t in multihop["test"] if t.difficulty == difficulty)
        run = run_oracle(task)
        assert run.correct, (task.instruction, run.error, run.answer)
        assert [s.result["result"] for s in run.steps] == task.expected["steps"]
