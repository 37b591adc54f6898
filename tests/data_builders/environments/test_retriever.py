"""RetrieverEnv: title-only substring search and exact-id reads (plus the oracle's reader)."""
from __future__ import annotations

import json

import pytest

from data_builders.environments import make_environment
from data_builders.environments.retriever import RetrieverEnv
from data_builders.oracle.solvers import retriever as reader
from tests.conftest import SHARED

DATA = SHARED / "data" / "when2tool"

# The benchmark's worked example (task 61501, docs/guide.md#when2tool-environments), rebuilt by hand: only the titles
# matter for ranking.
SPAIN = ("Madrid is the capital and largest city of Spain, situated in the center of the Iberian Peninsula. "
         "The city became the permanent capital in 1561.")
EXAMPLE = [
    {"id": "doc1", "title": "Germany continent reference", "text": "Germany is located in Europe."},
    {"id": "doc2", "title": "Egypt official language reference", "text": "Arabic is the official language of Egypt."},
    {"id": "doc3", "title": "dynamite inventor reference", "text": "Alfred Nobel is the inventor of dynamite."},
    {"id": "doc4", "title": "Japan capital city reference", "text": "Tokyo is the capital of Japan."},
    {"id": "doc5", "title": "Spain capital city reference", "text": SPAIN},
    {"id": "doc6", "title": "light bulb inventor reference", "text": "Thomas Edison ..."},
    {"id": "doc7", "title": "Silver chemical symbol reference", "text": "Ag is the chemical symbol for silver."},
    {"id": "doc8", "title": "Russia capital city reference", "text": "Moscow is the capital of Russia."},
    {"id": "doc9", "title": "United States currency reference", "text": "The US dollar ..."},
    {"id": "doc10", "title": "France capital city reference", "text": "Paris is the capital of France."},
]


def env(corpus=EXAMPLE, tools=None):
    return RetrieverEnv(parameters={"corpus": corpus}, tools=tools)


def search(query, corpus=EXAMPLE, **kw):
    return env(corpus).call("search_corpus", {"query": query, **kw})


def ranked(out):
    return [(h["id"], h["score"]) for h in out["data"]["hits"]]


# --------------------------------------------------------------------------- search_corpus


def test_worked_example_hand_built():
    out = search("capital of Spain")
    # doc5 scores 2. doc10, doc4, doc8 ("capital") and doc2 ("of" inside "official") score 1; the
    # id-string tie-break orders them doc10 < doc2 < doc4 < doc8, so doc10 and doc2 make the top 3.
    assert ranked(search("capital of Spain", top_k=5)) == [
        ("doc5", 2), ("doc10", 1), ("doc2", 1), ("doc4", 1), ("doc8", 1)]
    assert out == {
        "success": True,
        "data": {
            "query": "capital of Spain",
            "total_hits": 10,
            "returned": 3,
            "hits": [
                {"id": "doc5", "title": "Spain capital city reference", "snippet": SPAIN[:100] + "...", "score": 2},
                {"id": "doc10", "title": "France capital city reference",
                 "snippet": "Paris is the capital of France.", "score": 1},
                {"id": "doc2", "title": "Egypt official language reference",
                 "snippet": "Arabic is the official language of Egypt.", "score": 1},
            ],
        },
    }
    assert list(out) == ["success", "data"]
    assert list(out["data"]) == ["query", "total_hits", "returned", "hits"]
    assert all(list(h) == ["id", "title", "snippet", "score"] for h in out["data"]["hits"])


def test_worked_example_on_the_real_task():
    path = DATA / "tasks_v1_test.json"
    if not path.is_file():
        pytest.skip(f"When2Tool data not available at {path}")
    task = next(t for t in json.loads(path.read_text(encoding="utf-8")) if t["id"] == 61501)
    out = make_environment(task["environments"][0]).call("search_corpus", {"query": "capital of Spain"})
    assert ranked(out) == [("doc5", 2), ("doc10", 1), ("doc2", 1)]
    assert out["data"]["hits"][0]["title"] == "Spain capital city reference"


def test_tokens_keep_punctuation_and_match_as_substrings():
    assert ranked(search("spain?", top_k=1)) == [("doc1", 0)]  # "spain?" is not in "spain capital ..."
    assert ranked(search("SPAIN", top_k=1)) == [("doc5", 1)]  # lowercased on both sides
    assert ranked(search("apit", top_k=1)) == [("doc10", 1)]  # substring of "capital"; doc10 < doc4


def test_duplicate_tokens_each_count():
    assert ranked(search("capital capital spain", top_k=2)) == [("doc5", 3), ("doc10", 2)]


def test_ties_break_by_id_string_and_zero_scores_are_returned():
    out = search("zzz", top_k=10)
    assert [i for i, _ in ranked(out)] == ["doc1", "doc10", "doc2", "doc3", "doc4", "doc5", "doc6", "doc7",
                                           "doc8", "doc9"]
    assert {s for _, s in ranked(out)} == {0}


@pytest.mark.parametrize("top_k, returned", [(0, 1), (-5, 1), (1, 1), (2, 2), (50, 10), ("4", 4), (2.9, 2), (True, 1)])
def test_top_k_is_coerced_and_at_least_one(top_k, returned):
    out = search("capital", top_k=top_k)
    assert out["data"]["returned"] == returned == len(out["data"]["hits"])
    assert out["data"]["total_hits"] == 10


def test_default_top_k_is_three_and_bad_top_k_is_a_type_error():
    assert search("capital")["data"]["returned"] == 3
    assert search("capital", top_k="three") == {
        "success": False, "message": "Parameter top_k should have type integer."}


def test_snippet_cut_at_100_characters():
    corpus = [{"id": "a", "title": "t", "text": "x" * 100}, {"id": "b", "title": "t", "text": "y" * 101}]
    hits = search("t", corpus, top_k=2)["data"]["hits"]
    assert hits[0]["snippet"] == "x" * 100
    assert hits[1]["snippet"] == "y" * 100 + "..."


def test_empty_corpus_and_bad_queries():
    assert search("anything", []) == {
        "success": True, "data": {"query": "anything", "total_hits": 0, "returned": 0, "hits": []}}
    e = env()
    assert e.call("search_corpus", {}) == {"success": False, "message": "Missing required parameter query."}
    assert e.call("search_corpus", {"query": 5}) == {
        "success": False, "message": "[TOOL_RUNTIME_ERROR] AttributeError: 'int' object has no attribute 'lower'"}


def test_raw_question_search_statistics_match_the_benchmark():
    """The benchmark's oracle check: searching with the raw question (prefix removed) puts the answer-bearing
    document 1st in 117/210 single-hop tasks and in the top 3 in 184/210: a check of the exact scoring rule."""
    records = []
    for name in ("tasks_v1_train.json", "tasks_v1_test.json"):
        path = DATA / name
        if not path.is_file():
            pytest.skip(f"When2Tool data not available at {path}")
        records += [t for t in json.loads(path.read_text(encoding="utf-8")) if t["id"] // 10000 == 6]
    assert len(records) == 210
    first = top3 = 0
    for t in records:
        question = t["instruction"]
        for prefix in reader.PREFIXES:
            question = question.removeprefix(prefix)
        out = make_environment(t["environments"][0]).call("search_corpus", {"query": question, "top_k": 3})
        texts = [read_text(t, h["id"]).lower() for h in out["data"]["hits"]]
        gold = t["expected"]["answer"].lower()
        first += gold in texts[0]
        top3 += any(gold in x for x in texts)
    assert (first, top3) == (117, 184)


def read_text(task, doc_id):
    return next(d["text"] for d in task["environments"][0]["parameters"]["corpus"] if d["id"] == doc_id)


# --------------------------------------------------------------------------- read_doc


def test_read_doc_payload_exact():
    out = env().call("read_doc", {"doc_id": "doc5"})
    assert out == {
        "success": True,
        "data": {
            "doc_id": "doc5",
            "title": "Spain capital city reference",
            "content": SPAIN,
            "word_count": 25,
            "source": "local_corpus",
        },
    }
    assert list(out["data"]) == ["doc_id", "title", "content", "word_count", "source"]


def test_read_doc_exact_id_only():
    e = env()
    for bad in ("DOC5", "doc5 ", "5", "doc"):
        assert e.call("read_doc", {"doc_id": bad}) == {"success": False, "message": "Document not found."}
    assert e.call("read_doc", {}) == {"success": False, "message": "Missing required parameter doc_id."}
    # Whitespace-split word count: runs of spaces and newlines count once.
    corpus = [{"id": "d", "title": "t", "text": "  one\ttwo\n\nthree  "}]
    assert env(corpus).call("read_doc", {"doc_id": "d"})["data"]["word_count"] == 3


def test_tools_are_exposed_sorted_and_routed():
    e = env(tools=["search_corpus", "read_doc"])
    assert [s["function"]["name"] for s in e.tool_specs()] == ["read_doc", "search_corpus"]
    assert e.call("lookup", {}) == {"success": False, "message": "Tool lookup not available in this task."}


# --------------------------------------------------------------------------- the oracle's reader


@pytest.mark.parametrize("question, hint, text, answer", [
    ("What is the capital of Spain?", "Return city only.", SPAIN, "Madrid"),
    ("What currency is used in Japan?", "Return currency name only.",
     "The yen is the official currency of Japan.", "yen"),
    ("Which continent is Kenya in?", "Return continent only.",
     "Kenya is located in Africa, on the east coast.", "Africa"),
    ("Who invented the Frostbore Drill?", "Return the full name only.",
     "Dr. Halvard Stenmark invented the Frostbore Drill in 1926. It was used later.", "Dr. Halvard Stenmark"),
    ("What is the primary habitat of the Quillfen Otter?", "Return the location name only.",
     "The Reedmoor Wetlands are the primary habitat of the Quillfen Otter, a small otter.", "The Reedmoor Wetlands"),
    ("What is the thermal conductivity of Frostite?", "Return the value only.",
     "A thermal conductivity of zero is the remarkable property of Frostite.", "zero"),
    ("What is the melting point of Quellite?", "Return the temperature only.",
     "A melting point of 1,920 degrees Celsius allows Quellite to line furnaces.", "1,920 degrees Celsius"),
    ("What is the elevation of Mount X?", "Return the elevation only.",
     "An elevation of 6,412 meters above sea level makes Mount X tall.", "6,412 meters"),
    ("How many letters are in the Ralthi alphabet?", "Return the number only.",
     "An alphabet of 27 letters is used to write Ralthi. About 90,000 people speak it.", "27"),
    ("What is the main feature of Gildenreach Terrace architecture?", "Return the main feature only.",
     "Stepped stone courtyards carved into the mountainside characterize the style.", "Stepped stone courtyards"),
])
def test_reader_extracts_the_answer_phrase(question, hint, text, answer):
    assert reader.extract_answer(question, hint, text) == answer


def test_multihop_solver_chains_answers():
    from data_builders.tasks.schema import Task

    corpus = [
        {"id": "doc1", "title": "Moby-Dick", "text": "Moby-Dick is an 1851 novel by Herman Melville about a whale."},
        {"id": "doc2", "title": "Herman Melville biography",
         "text": "Herman Melville was born in New York City, United States, in 1819."},
        {"id": "doc3", "title": "United States capital",
         "text": "The capital of the United States is Washington, D.C., established in 1790."},
        {"id": "doc4", "title": "Sahara Desert", "text": "The Sahara is the largest hot desert in the world."},
    ]
    task = Task.from_dict({
        "id": 1, "difficulty": "easy", "multi_step": True,
        "instruction": "Three-step retrieval: Step 1: Who wrote Moby-Dick? Call the answer x. Step 2: In which "
                       "country was x born? Call the answer y. Step 3: What is the capital of y? Call the answer z. "
                       "Return only z.",
        "environments": [{"name": "RetrieverEnv", "tools": ["search_corpus", "read_doc"],
                          "parameters": {"corpus": corpus}}],
        "expected": {"answer": "Washington, D.C.", "steps": ["Herman Melville", "United States", "Washington, D.C."]},
        "tags": ["retrieval", "multihop_3step"], "split": "test",
    })
    e = make_environment(task.env)
    assert reader.solve_multihop(task, e.call) == "Washington, D.C."
    assert e.call_counts == {"search_corpus": 3, "read_doc": 3}
