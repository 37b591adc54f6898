"""The ``gsm8k`` task source: GSM8K-format math word problems solved with the Calculator tool.

"Are Tools All We Need? Unveiling the Tool-Use Tax in LLM Agents" (arXiv 2605.00136) measures calculator use
on GSM8K problems, clean and with semantic distractors; this source turns such a file into When2Tool-schema
tasks for the same environments, prompts and scoring as the other sources.

Input: JSON lines ``{"question": ..., "answer": "<worked solution> #### 72"}`` (GSM8K's own format;
``train.jsonl`` from github.com/openai/grade-school-math). Per line:

* gold: the text after ``####``, stripped, thousands commas removed (``"1,000"`` gives ``"1000"``); it must
  then be a number by the scorer's rule (``"seventy-two"`` is refused);
* difficulty: from the number of ``<<expr=value>>`` calculator annotations in the solution, a proxy
  for the number of arithmetic steps: at most 2 easy, 3-4 medium, 5 or more hard; multi_step when
  there is more than one;
* split: GSM8K's train file has no held-out part, so a fixed hash of the question text puts about
  10% of problems in ``test`` and the rest in ``train``. The split never depends on the seed, the
  distractor or the file order, so train and test stay disjoint and stable (duplicate questions land
  in the same split);
* id: ``gsm8k-<line index>`` (0-based physical line; ``-<kind>`` appended with a distractor), so an
  id names its line even when blank lines are skipped;
* expected: besides ``answer``, ``calculations`` (the solution's annotations as
  ``[{"expression", "value"}, ...]``) and ``evidence`` (the original question, without any distractor),
  which the factorized framework's oracle conditions read (``trainers/evaluate/factorized.py``). Not ``steps``:
  that key sets ``Task.expected_steps`` and with it the tool-call-rate metric.

Errors name the file, the 1-based line number (as ``record``) and the field.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from .distractors import DISTRACTOR_KINDS, add_distractor, distractor_rng
from .generators.calculator import TOOLS as CALCULATOR_TOOLS
from .schema import SPLITS, Task, TaskFormatError
from .scoring import parse_number

__all__ = ["TEST_FRACTION", "calculator_annotations", "difficulty_of", "instruction_for", "load_gsm8k",
           "question_split"]

TEST_FRACTION = 0.1
# The answer format of When2Tool's numeric tasks; the agent prompt adds the \boxed{} instruction.
ANSWER_FORMAT = "Answer with only the number."
_ANNOTATION = re.compile(r"<<([^<>]*)>>")


def calculator_annotations(solution: str) -> list[tuple[str, str]]:
    """The ``(expression, value)`` pairs of a GSM8K solution's ``<<expression=value>>`` annotations."""
    pairs = []
    for body in _ANNOTATION.findall(solution):
        expr, _, value = body.rpartition("=")
        pairs.append((expr.strip(), value.strip()))
    return pairs


def instruction_for(question: str) -> str:
    """A task's instruction from its (possibly distracted) question text."""
    return f"{question} {ANSWER_FORMAT}"


def difficulty_of(n_annotations: int) -> str:
    """At most 2 calculator steps is easy, 3-4 medium, 5 or more hard."""
    return "easy" if n_annotations <= 2 else "medium" if n_annotations <= 4 else "hard"


def question_split(question: str) -> str:
    """``test`` for about :data:`TEST_FRACTION` of questions, by a SHA-256 of the text; else ``train``."""
    h = int.from_bytes(hashlib.sha256(f"toolwise.gsm8k.split\x1f{question}".encode("utf-8")).digest()[:8], "big")
    return "test" if h < TEST_FRACTION * 2 ** 64 else "train"


def _field(rec: dict, name: str, source: str, line: int) -> str:
    if name not in rec:
        raise TaskFormatError(source, line, name, "missing")
    value = rec[name]
    if not isinstance(value, str):
        raise TaskFormatError(source, line, name, f"expected a string, got {type(value).__name__}")
    if not value.strip():
        raise TaskFormatError(source, line, name, "empty")
    return value.strip()


def load_gsm8k(path: str | Path, split: str = "train", *, distractor: str | None = None,
               distractor_seed: int = 0) -> list[Task]:
    """The tasks of ``split`` from a GSM8K-format JSONL file, in file order.

    ``distractor``: one of :data:`~data_builders.tasks.distractors.DISTRACTOR_KINDS` to insert one
    distractor sentence per problem, seeded by ``(distractor_seed, line index)``. Filtering and
    ``limit`` are applied by :func:`data_builders.tasks.load_tasks`.
    """
    if split not in SPLITS:
        raise ValueError(f"split {split!r} not in {SPLITS}")
    if distractor is not None and distractor not in DISTRACTOR_KINDS:
        raise ValueError(f"unknown distractor {distractor!r}; choose one of {DISTRACTOR_KINDS} or null")
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"GSM8K file not found: {path} (expected a .jsonl file, e.g. "
                                "GSM8K's train.jsonl)")
    source = str(path)
    tasks = []
    # Bytes, decoded per line, so that a non-UTF-8 byte is reported with its line (text mode would only say
    # which byte of some read-ahead buffer failed).
    with path.open("rb") as fh:
        for index, data in enumerate(fh):
            line = index + 1
            try:
                raw = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TaskFormatError(source, line, "<encoding>", f"not valid UTF-8 (byte {data[exc.start]:#04x} "
                                      f"at column {exc.start + 1}); GSM8K files are UTF-8 JSON lines") from exc
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise TaskFormatError(source, line, "<json>", f"not valid JSON: {exc}") from exc
            if not isinstance(rec, dict):
                raise TaskFormatError(source, line, "<record>", f"expected an object, got {type(rec).__name__}")
            question = _field(rec, "question", source, line)
            solution = _field(rec, "answer", source, line)
            if "####" not in solution:
                raise TaskFormatError(source, line, "answer", "no '#### <gold>' marker")
            gold = solution.rpartition("####")[2].strip().replace(",", "")
            if not gold:
                raise TaskFormatError(source, line, "answer", "empty gold after '####'")
            # Every GSM8K gold is a number and the Calculator answers in numbers: a word ("seventy-two") could
            # never be matched, and its task would count as a failure of the policy.
            if parse_number(gold) is None:
                raise TaskFormatError(source, line, "answer", f"gold {gold!r} after '####' is not a number "
                                      "(an integer or decimal such as 72, -3 or 2.5)")
            if question_split(question) != split:
                continue
            steps = calculator_annotations(solution)
            text, tid, tags = question, f"gsm8k-{index}", ["gsm8k"]
            if distractor:
                avoid = [gold, *(value for _, value in steps)]
                text = add_distractor(question, distractor, distractor_rng(distractor_seed, index, distractor),
                                      avoid=avoid)
                tid, tags = f"{tid}-{distractor}", tags + [distractor]
            record = {
                "id": tid,
                "instruction": instruction_for(text),
                "environments": [{"name": "CalculatorEnv", "tools": list(CALCULATOR_TOOLS), "parameters": {}}],
                "expected": {"answer": gold, "evidence": question,
                             "calculations": [{"expression": e, "value": v} for e, v in steps]},
                "difficulty": difficulty_of(len(steps)),
                "multi_step": len(steps) > 1,
                "tags": tags,
                "category": "A",
                "split": split,
            }
            tasks.append(Task.from_dict(record, source=source, index=line))
    return tasks
