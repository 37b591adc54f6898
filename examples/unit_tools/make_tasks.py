"""Writes the example's made-up data (``data.json``) and its 160 tasks (``tasks.jsonl``), deterministically.

    python examples/unit_tools/make_tasks.py [OUT_DIR]      # default: next to this file

Four kinds of question, 40 each, so that a gate has both sides to learn:

* ``known``: conversions and facts a small instruction-tuned model often answers unaided (100 cm in a metre);
* ``conversion``: conversions with awkward numbers (37.4 miles in km), which the server computes exactly;
* ``lookup``: keys of made-up tables (warehouse W-417's city), which nobody knows without the tool;
* ``search``: facts in made-up product notes, which only the server's search finds.

Scorers: numeric with a 1 % relative tolerance for numbers, normalized text for names. Splits: a seeded
split by id (the loader's default, 30 % test).
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = {"kind": "mcp", "name": "unit_tools", "command": ["python", "server.py"]}
CITIES = ["Lisbon", "Osaka", "Tallinn", "Quito", "Perth", "Ghent", "Tromso", "Cusco", "Hobart", "Leipzig",
          "Bergen", "Malaga", "Nagoya", "Porto", "Split", "Turku"]
NAMES = ["Amara Quist", "Bo Lindqvist", "Chidi Okafor", "Dana Weiss", "Eitan Marr", "Farah Haddad", "Goro Sato",
         "Hana Novak", "Ines Duarte", "Jonas Berg", "Kaia Moreau", "Lior Ben-Ami", "Mei Tanaka", "Nils Ek"]
PRODUCTS = ["Zephyr X2 headset", "Basalt B7 drill", "Kestrel K3 drone", "Orchid O5 lamp", "Tundra T9 tent",
            "Quill Q1 tablet", "Marlin M4 kayak", "Cobalt C8 router", "Fennel F2 blender", "Granite G6 safe"]
ATTRIBUTES = [("battery life", "hours"), ("weight", "grams"), ("warranty", "months"), ("price", "euros")]

KNOWN = [  # (question, answer): things a small model has seen many times
    ("How many centimetres are in {n} metres?", lambda n: n * 100),
    ("How many grams are in {n} kilograms?", lambda n: n * 1000),
    ("How many millilitres are in {n} litres?", lambda n: n * 1000),
    ("How many metres are in {n} kilometres?", lambda n: n * 1000),
    ("How many minutes are in {n} hours?", lambda n: n * 60),
    ("How many seconds are in {n} minutes?", lambda n: n * 60),
    ("What is {n} plus {n}?", lambda n: 2 * n),
    ("How many days are in {n} weeks?", lambda n: 7 * n),
]
CONVERSIONS = [("mi", "km", "miles", "kilometres"), ("lb", "kg", "pounds", "kilograms"),
               ("gal", "l", "US gallons", "litres"), ("F", "C", "degrees Fahrenheit", "degrees Celsius"),
               ("ft", "m", "feet", "metres"), ("oz", "g", "ounces", "grams"), ("in", "cm", "inches", "centimetres"),
               ("qt", "ml", "US quarts", "millilitres")]
FACTOR = {("mi", "km"): 1.609344, ("lb", "kg"): 0.45359237, ("gal", "l"): 3.785411784, ("ft", "m"): 0.3048,
          ("oz", "g"): 28.349523125, ("in", "cm"): 2.54, ("qt", "ml"): 946.352946}


def numeric(answer: float) -> tuple[str, dict]:
    return f"{round(answer, 4):g}", {"kind": "numeric", "tolerance": 0.01, "relative": True}


def main(out: Path = HERE) -> None:
    rng = random.Random(7)
    warehouses = {f"W-{rng.randint(100, 999)}": rng.choice(CITIES) for _ in range(40)}
    parts = {f"P{rng.randint(1000, 9999)}-{rng.choice('ABCDEFGH')}": rng.randint(20, 4000) for _ in range(40)}
    staff = {f"E{rng.randint(10000, 99999)}": rng.choice(NAMES) for _ in range(40)}
    notes, facts = [], []
    for product in PRODUCTS:
        for attribute, unit in ATTRIBUTES:
            value = rng.randint(2, 90) if attribute != "price" else rng.randint(19, 900)
            facts.append((product, attribute, unit, value))
        text = " ".join(f"Its {a} is {v} {u}." for p, a, u, v in facts if p == product)
        notes.append({"title": product, "text": f"The {product}. {text}"})
    (out / "data.json").write_text(json.dumps({"tables": {"warehouses": warehouses, "parts": parts,
                                                           "staff": staff}, "notes": notes}, indent=1) + "\n")
    records = []

    def add(kind: str, question: str, answer: str, scorer, difficulty: str) -> None:
        records.append({"id": f"{kind}-{sum(r['category'] == kind for r in records):03d}", "instruction": question,
                        "tools": [SOURCE], "answer": answer, "scorer": scorer, "category": kind,
                        "difficulty": difficulty})

    for i in range(40):
        template, fn = KNOWN[i % len(KNOWN)]
        n = rng.randint(2, 9)
        add("known", template.format(n=n), *numeric(fn(n)), "easy")
    for i in range(40):
        src, dst, src_name, dst_name = CONVERSIONS[i % len(CONVERSIONS)]
        value = round(rng.uniform(1.5, 250.0), 1)
        answer = (value - 32) * 5 / 9 if src == "F" else value * FACTOR[(src, dst)]
        add("conversion", f"Convert {value} {src_name} to {dst_name}.", *numeric(answer), "medium")
    for i, (table, rows) in enumerate([("warehouses", warehouses), ("parts", parts), ("staff", staff)] * 14):
        if len([r for r in records if r["category"] == "lookup"]) == 40:
            break
        key = sorted(rows)[i // 3]
        value = rows[key]
        question = {"warehouses": f"In which city is warehouse {key}?",
                    "parts": f"How many grams does part {key} weigh?",
                    "staff": f"What is the name of employee {key}?"}[table]
        scorer = numeric(value)[1] if table == "parts" else "normalized"
        add("lookup", question, str(value), scorer, "medium")
    for product, attribute, unit, value in rng.sample(facts, 40):
        add("search", f"According to the product notes, what is the {attribute} of the {product} (in {unit})?",
            *numeric(value), "hard")
    with open(out / "tasks.jsonl", "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{len(records)} tasks: " + ", ".join(f"{k} {sum(r['category'] == k for r in records)}"
                                                for k in ("known", "conversion", "lookup", "search")))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
