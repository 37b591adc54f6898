"""Built-in generators for HashEnv, DecodingEnv and DateTimeEnv: determinism, split hygiene, When2Tool
templates and tool lists, gold formats (docs/guide.md#when2tool-tasks-and-gold-formats) and per-difficulty content
ranges."""
from __future__ import annotations

import collections
import hashlib
import json
import re
from datetime import date, timedelta
from functools import lru_cache

import pytest

from data_builders.tasks.builtin import generate_builtin
from data_builders.tasks.generators.datetime_env import MONTHS
from data_builders.tasks.generators.decoding import caesar, morse, substitute
from data_builders.tasks.generators.hash import reference_hash
from data_builders.tasks.schema import DIFFICULTIES
from tests.conftest import SHARED

ENVS = ("HashEnv", "DecodingEnv", "DateTimeEnv")
ENV_NO = {"HashEnv": 9, "DecodingEnv": 10, "DateTimeEnv": 12}
TAGS = {"HashEnv": "hash", "DecodingEnv": "decoding", "DateTimeEnv": "datetime"}
TOOLS = {"HashEnv": ("compute_hash",), "DecodingEnv": ("encode", "decode"),
         "DateTimeEnv": ("date_diff", "date_add", "day_of_week")}
DATA = SHARED / "data" / "when2tool"
N = 40
WEEKDAYS = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}

HASH_RE = re.compile(r"^What is the (MD5|SHA1|SHA256|[A-Z0-9]+_CUSTOM) hash of (the empty string )?'(.*)'\? "
                     r"(This is a custom hash algorithm available via the compute_hash tool\. )?"
                     r"Answer with only the hex string\.$")
_M = "(" + "|".join(MONTHS) + r") (\d{1,2})"
DIFF_RE = re.compile(rf"^How many days are between {_M}(?:, (\d{{4}}))? and {_M}, (\d{{4}})\? "
                     r"Answer with only the number\.$")
ADD_RE = re.compile(rf"^What date is (\d+) days after {_M}, (\d{{4}})\?( \(Note: (\d{{4}}) is a leap year\.\))? "
                    r"Answer in YYYY-MM-DD format only\.$")
DOW_RE = re.compile(rf"^What day of the week is {_M}, (\d{{4}})\? Answer with only the day name \(e\.g\. Monday\)\.$")
MORSE_ENC_RE = re.compile(r"^Encode '([A-Z]+)' in Morse code\. Answer with only the Morse code "
                          r"\(dots and dashes separated by spaces, words by /\)\.$")
MORSE_DEC_RE = re.compile(r"^Decode this Morse code: '([.\- /]+)'\. Answer with only the decoded text in uppercase\.$")
ROT13_RE = re.compile(r"^Apply Caesar cipher with shift (\d+) to '([A-Z]+)'\. Answer with only the result\.$")
CAESAR_ENC_RE = re.compile(r"^Encode '([A-Z]+)' using Caesar cipher with shift (\d+)\. Answer with only the result\.$")
CAESAR_DEC_RE = re.compile(r"^Decode '([A-Z]+)' using Caesar cipher with shift (\d+)\. "
                           r"Answer with only the decoded text\.$")
CUSTOM_RE = re.compile(r"^(Encode|Decode) '([A-Z]+)' using the custom cipher called '(\w+)'\. "
                       r"Use the (encode|decode) tool with encoding_type='custom' and key='(\w+)'\. "
                       r"Answer with only the (encoded|decoded) text\.$")


@lru_cache(maxsize=None)
def generated(split: str, seed: int = 0, n: int = N):
    return tuple(generate_builtin(split, n_per_cell=n, seed=seed, envs=list(ENVS)))


def cell(split, env, difficulty):
    return [t for t in generated(split) if t.env.name == env and t.difficulty == difficulty]


def both(env, difficulty):
    return cell("train", env, difficulty) + cell("test", env, difficulty)


def to_date(month, day, year):
    return date(int(year), MONTHS.index(month) + 1, int(day))


# --------------------------------------------------------------------------- contract


def test_counts_tags_tools_and_params():
    for split in ("train", "test"):
        ts = generated(split)
        assert len(ts) == len(ENVS) * 3 * N
        for t in ts:
            assert t.env.tools == TOOLS[t.env.name]
            assert t.tags == (TAGS[t.env.name], "single_round")
            assert t.env.parameters == {} and t.split == split and not t.multi_step


def test_deterministic_seed_sensitive_and_prefix_stable():
    a = [t.to_dict() for t in generate_builtin("test", n_per_cell=6, seed=7, envs=list(ENVS))]
    b = [t.to_dict() for t in generate_builtin("test", n_per_cell=6, seed=7, envs=list(ENVS))]
    assert a == b
    c = [t.to_dict() for t in generate_builtin("test", n_per_cell=6, seed=8, envs=list(ENVS))]
    assert [t["instruction"] for t in a] != [t["instruction"] for t in c]
    small = generate_builtin("train", n_per_cell=3, seed=0, envs=["DecodingEnv"])
    assert [t.to_dict() for t in small] == [t.to_dict() for t in generated("train")
                                            if t.env.name == "DecodingEnv" and int(t.id[-4:]) < 3]


def test_splits_disjoint_across_seeds_and_no_duplicates_in_a_cell():
    train = {t.instruction for s in (0, 1) for t in generate_builtin("train", n_per_cell=N, seed=s, envs=list(ENVS))}
    test = {t.instruction for s in (0, 1) for t in generate_builtin("test", n_per_cell=N, seed=s, envs=list(ENVS))}
    assert not train & test
    for split in ("train", "test"):
        for env in ENVS:
            for d in DIFFICULTIES:
                instr = [t.instruction for t in cell(split, env, d)]
                assert len(set(instr)) == len(instr) == N


def test_pools_fill_a_large_cell():
    # The fixed word pools (Hash easy/medium, Decoding) must fill a When2Tool-sized test cell.
    ts = generate_builtin("test", n_per_cell=80, seed=3, envs=["HashEnv", "DecodingEnv"])
    assert len(ts) == 2 * 3 * 80 and len({t.instruction for t in ts}) == len(ts)


# --------------------------------------------------------------------------- Hash


def test_reference_hash_matches_spec_vectors():
    assert reference_hash("abc", "FNV1A_CUSTOM") == "45c643068c37529f"
    assert reference_hash("abc", "JENKINS_CUSTOM") == "a9083dd89eaa41b6"
    assert reference_hash("", "DJB2_CUSTOM") == "00000000abcd0731"
    assert reference_hash("abc", "SHA1") == "a9993e364706816aba3e25717850c26c9cd0d89d"


def test_hash_gold_formats_and_content():
    hex_len = {"MD5": 32, "SHA1": 40, "SHA256": 64}
    for d in DIFFICULTIES:
        algos = collections.Counter()
        for t in both("HashEnv", d):
            m = HASH_RE.match(t.instruction)
            assert m, t.instruction
            algo, empty, text, custom_note = m.groups()
            algos[algo] += 1
            assert bool(empty) == (text == "")
            assert re.fullmatch(r"[0-9a-f]+", t.answer)
            if d == "hard":
                assert custom_note and algo.endswith("_CUSTOM") and len(t.answer) == 16
                assert re.fullmatch(r"[A-Za-z0-9]{3,15}", text)
            else:
                assert not custom_note and len(t.answer) == hex_len[algo]
                assert t.answer == hashlib.new(algo.lower(), text.encode()).hexdigest()
                assert len(text) <= (8 if d == "easy" else 30)
        expected = {"easy": {"MD5", "SHA1"}, "medium": {"MD5", "SHA1", "SHA256"},
                    "hard": {"FNV1A_CUSTOM", "DJB2_CUSTOM", "SDBM_CUSTOM", "MURMUR_CUSTOM", "JENKINS_CUSTOM"}}[d]
        assert set(algos) == expected, algos


# --------------------------------------------------------------------------- Decoding


def test_reference_ciphers():
    assert morse("SOS") == "... --- ..." and morse("HI YOU") == ".... .. / -.-- --- ..-"
    assert caesar("VECTOR", 7) == "CLJAVY" and caesar("CLJAVY", -7) == "VECTOR"
    assert substitute("PUZZLE", "scramble1") == "HXMMST" and substitute("HXMMST", "scramble1", inverse=True) == "PUZZLE"
    assert substitute("ABZ", "alpha7") == "HIG" and substitute("ABZ", "reverse") == "ZYA"


def test_decoding_gold_formats_and_content():
    kinds = {d: collections.Counter() for d in DIFFICULTIES}
    for d in DIFFICULTIES:
        for t in both("DecodingEnv", d):
            s, a = t.instruction, t.answer
            if m := MORSE_ENC_RE.match(s):
                kinds[d]["morse_enc"] += 1
                word = m.group(1)
                assert re.fullmatch(r"[.\-]+( [.\-]+)*", a) and a == morse(word)
            elif m := MORSE_DEC_RE.match(s):
                kinds[d]["morse_dec"] += 1
                word = a
                assert morse(word) == m.group(1)
            elif m := ROT13_RE.match(s):
                kinds[d]["rot13"] += 1
                word = m.group(2)
                assert m.group(1) == "13" and a == caesar(word, 13)
            elif m := CAESAR_ENC_RE.match(s):
                kinds[d]["caesar_enc"] += 1
                word, shift = m.group(1), int(m.group(2))
                assert 5 <= shift <= 20 and a == caesar(word, shift)
            elif m := CAESAR_DEC_RE.match(s):
                kinds[d]["caesar_dec"] += 1
                word, shift = a, int(m.group(2))
                assert 3 <= shift <= 15 and caesar(word, shift) == m.group(1)
            elif m := CUSTOM_RE.match(s):
                verb, text, key, tool, key2, kind = m.groups()
                assert verb.lower() == tool and kind == tool + "d"
                assert key == key2 and key in ("alpha7", "reverse", "scramble1", "scramble2")
                kinds[d][f"custom_{tool}_{key}"] += 1
                word = text if tool == "encode" else a
                assert substitute(word, key) == (a if tool == "encode" else text)
            else:
                pytest.fail(f"unknown Decoding template: {s}")
            assert re.fullmatch(r"[A-Z]+", word)
            assert 2 <= len(word) <= 4 if d == "easy" else 5 <= len(word) <= 8
            assert a == a.upper()
    assert set(kinds["easy"]) == {"morse_enc", "morse_dec", "rot13"}
    assert set(kinds["medium"]) == {"morse_enc", "morse_dec", "caesar_enc", "caesar_dec"}
    assert len(kinds["hard"]) == 8  # four keys x two directions


# --------------------------------------------------------------------------- DateTime


def test_datetime_gold_formats_and_content():
    for d in DIFFICULTIES:
        kinds = collections.Counter()
        for t in both("DateTimeEnv", d):
            s, a = t.instruction, t.answer
            if m := DIFF_RE.match(s):
                kinds["diff"] += 1
                m1, d1, y1, m2, d2, y2 = m.groups()
                start, end = to_date(m1, d1, y1 or y2), to_date(m2, d2, y2)
                assert a == str(abs((end - start).days))
                assert (y1 is None) == (d != "hard")
                if d == "easy":
                    assert start.month == end.month and 2 <= (end - start).days <= 22
                elif d == "medium":
                    assert start.month < end.month and 0 < (end - start).days <= 80
                else:
                    assert 1950 <= start.year <= 2000 and 2020 <= end.year <= 2050
            elif m := ADD_RE.match(s):
                kinds["add"] += 1
                n, mo, dd, y, note, leap = m.groups()
                start = to_date(mo, dd, y)
                result = date.fromisoformat(a)
                assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", a) and result == start + timedelta(days=int(n))
                if d == "easy":
                    assert (result.year, result.month) == (start.year, start.month) and 1 <= int(n) <= 7
                elif d == "medium":
                    assert result.year > start.year or (note and start.month == 2 and result.month == 3)
                    if note:
                        kinds["leap"] += 1
                        assert leap == y and int(y) % 4 == 0
                else:
                    assert 400 <= int(n) <= 3600 and not note
            elif m := DOW_RE.match(s):
                kinds["dow"] += 1
                day = to_date(*m.groups())
                assert a in WEEKDAYS
                assert ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday",
                        "Sunday")[day.weekday()] == a
                assert (2020 <= day.year <= 2026) if d == "easy" else (1900 <= day.year <= 2100)
            else:
                pytest.fail(f"unknown DateTime template: {s}")
        expected = {"easy": {"diff", "add", "dow"}, "medium": {"diff", "add", "leap"}, "hard": {"diff", "add", "dow"}}
        assert set(kinds) == expected[d], (d, kinds)


# --------------------------------------------------------------------------- When2Tool parity


@lru_cache(maxsize=None)
def _real():
    path = DATA / "tasks_v1_train.json"
    if not path.is_file():
        pytest.skip(f"When2Tool data not available at {path}")
    return json.loads(path.read_text()) + json.loads((DATA / "tasks_v1_test.json").read_text())


def shape(instruction: str) -> str:
    s = re.sub("|".join(MONTHS), "M", instruction)
    s = re.sub(r"'[^']*'", "'S'", s)
    return re.sub(r"\d+", "N", s)


@pytest.mark.parametrize("env", ENVS)
def test_tools_tags_and_templates_match_when2tool_files(env):
    real = _real()
    for di, d in enumerate(DIFFICULTIES, start=1):
        ref = [r for r in real if r["id"] // 10000 == ENV_NO[env] and r["id"] // 1000 % 10 == di]
        ours = both(env, d)
        assert ref and ours
        assert {r["environments"][0]["name"] for r in ref} == {env}
        assert {tuple(r["environments"][0]["tools"]) for r in ref} == {t.env.tools for t in ours}
        assert {tuple(r["tags"]) for r in ref} == {t.tags for t in ours}
        ref_shapes = {shape(r["instruction"]) for r in ref}
        our_shapes = {shape(t.instruction) for t in ours}
        # Same set of phrasings (the hash algorithm names, e.g. MD5 -> MDN, are part of the shape).
        assert our_shapes <= ref_shapes, our_shapes - ref_shapes
        # Every phrasing is produced, except possibly the rare "the empty string ''" one in a small sample.
        assert all("empty string" in s for s in ref_shapes - our_shapes), ref_shapes - our_shapes
