"""RetrieverEnv: search the corpus, read the best-titled document, pick the answer phrase out of it.

Neither half is mechanical (docs/guide.md#when2tool-the-oracle). The tool ranks titles by substring hits of raw
tokens, so the solver searches with the question's content words only (no "spain?"-style punctuation, no "of"
matching "official") and then re-ranks the returned titles by whole-word overlap with the question.
The reader relies on how reference documents are written: the first sentence *starts* with the
answer phrase ("Madrid is the capital of Spain ...", "A melting point of 3,847 degrees Celsius
makes Ashite ..."), except continent facts ("Kenya is located in Africa"). The answer-format hint
("Return the number only") decides how much of the opening phrase to keep.

Multi-hop tasks ("Step 1: Q1 Call the answer x. Step 2: Q2(x) ...") run the same search/read per
hop with the previous answers substituted, and read with a generic extractor; both are best effort.
"""
from __future__ import annotations

import re

from ...tasks.schema import Task
from ..base import CallFn, OracleParseError

PREFIXES = ("From local corpus only: ", "From local corpus: ")
TOP_K = 3
READS_PER_HOP = 2  # a second document is read only when the first yields no answer

_STOP = frozenset("""a an the of in on at to for from by with and or is are was were be been does do did
    what which who whom whose when where how why that this these those it its into as than return only
    one full name x y z call answer step""".split())
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\-.]*[A-Za-z0-9]|[A-Za-z0-9]")
# Numbers as written in reference texts: 3,847 / 9.2 / 1326.
_NUMBER = r"(?<![\w.,])(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?![\w]|[.,]\d)"
# The verb that ends the opening (answer) phrase of a reference document.
_OPENING_VERB = re.compile(
    r"\s(?:is|are|was|were|serves as|serve as|invented|developed|created|designed|built|founded|"
    r"discovered|documented|identified|first|makes|make|defines|define|distinguishes|distinguish|"
    r"characterizes|characterize|gives|give|forms|form|allows|allow|keeps|keep|builds|lets|holds|"
    r"remains|stands|lies)\s"
)
# Words that end a measured value: "6,412 meters above sea level", "340 kilometers from source".
_UNIT_STOP = frozenset("""above below from to into onto on in at of for with across along away over under
    near beyond makes make is are was were defines define gives give forms form allows allow keeps keep
    builds lets holds that which when where while north south east west long wide tall high deep old""".split())
# Words that end a "feature" phrase: "Exposed iron framework with riveted joints ...".
_FEATURE_CUT = re.compile(
    r"\s(?:with|that|which|where)\s"
    r"|\s\w+(?:ed|built|cut|set|laid|dug)\s(?:by|with|into|as|on|in|from|at|to|around|over)\s"
)
_NUMERIC_HINTS = frozenset({"number"})
_MEASURE_HINTS = frozenset({
    "temperature", "elevation", "length", "depth", "area", "volume", "distance", "angle", "height", "value",
    "range", "comparison", "frequency", "speed", "weight", "diameter", "width", "size", "duration",
    "population", "wingspan",
})
# Hint words that say nothing about the answer's wording ("Return the full name only").
_HINT_NOISE = frozenset("return the only one full name main feature number value".split())
# Real-world reference relations whose answers never keep a leading "The" ("The yen is ...": "yen").
_REAL_RELATIONS = (
    "what is the capital of", "what currency is used in", "what is the currency of",
    "what is an official language of", "what is the official language of", "who wrote",
    "who is credited with inventing", "who invented", "what is the chemical symbol for",
    "what is the highest mountain in", "which planet is known as", "what is the largest moon of",
)


def _words(text: str) -> list[str]:
    return [t.lower() for t in _TOKEN.findall(text)]


def _stem(word: str) -> str:
    """Crude stem: plural and possessive endings off, then at most 7 letters, so "architecture"
    and "architectural" (or "inventor"/"inventing") meet."""
    w = word.lower().rstrip(".'")
    if w.endswith("'s"):
        w = w[:-2]
    for suffix in ("ies", "es", "s"):
        if w.endswith(suffix) and len(w) > len(suffix) + 2:
            w = w[: -len(suffix)] + ("y" if suffix == "ies" else "")
            break
    return w[:7]


def content_words(text: str) -> list[str]:
    return [w for w in _words(text) if w not in _STOP]


def split_instruction(instruction: str) -> tuple[str, str]:
    """(question, answer-format hint) of a single-hop instruction, prefix removed."""
    text = instruction.strip()
    for prefix in PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    if "?" not in text:
        raise OracleParseError("no question in the instruction")
    cut = text.index("?") + 1
    return text[:cut], text[cut:].strip()


# ----------------------------------------------------------------------------- retrieval


def title_overlap(question: str, title: str) -> tuple[int, int, int]:
    """Re-ranking key: capitalised (name) words shared by question and title, then all shared
    words (stemmed), then fewer title words the question lacks. Names come first because the
    generic words ("feature", "reference", "capital") are shared by many titles."""
    q = {_stem(w) for w in content_words(question)}
    q_names = {_stem(w) for w in _TOKEN.findall(question) if w[0].isupper() and w.lower() not in _STOP}
    title_words = [w for w in _TOKEN.findall(title) if w.lower() not in _STOP and w.lower() != "reference"]
    stems = [_stem(w) for w in title_words]
    names = sum(1 for w, st in zip(title_words, stems) if w[0].isupper() and st in q_names)
    hits = sum(1 for st in stems if st in q)
    return names, hits, -(len(stems) - hits)


def find_documents(question: str, call: CallFn) -> list[dict]:
    """Search with the question's content words and return the hits, best title match first."""
    query = " ".join(content_words(question)) or question
    out = call("search_corpus", {"query": query, "top_k": TOP_K})
    hits = list(out["data"]["hits"])
    # Stable sort: the tool's own order breaks ties.
    hits.sort(key=lambda h: title_overlap(question, h["title"]), reverse=True)
    return hits


def read(doc_id: str, call: CallFn) -> str:
    out = call("read_doc", {"doc_id": doc_id})
    return out["data"]["content"]


# ----------------------------------------------------------------------------- reading


_ABBREVIATIONS = frozenset({"dr", "mr", "mrs", "ms", "st", "prof", "jr", "sr", "mt", "no", "vs", "ft"})


def sentences(text: str) -> list[str]:
    """Split at a period followed by a capitalised word, except after an abbreviation or an initial,
    so "Dr. Liora Ashcroft", "J. R. R. Tolkien" and "Washington, D.C." stay whole."""
    out, start = [], 0
    for m in re.finditer(r"\.\s+(?=[A-Z])", text):
        word = re.search(r"(\w+)$", text[start: m.start()])
        if word is None or len(word.group(1)) == 1 or word.group(1).lower() in _ABBREVIATIONS:
            continue
        out.append(text[start: m.start()])
        start = m.end()
    out.append(text[start:])
    return out


def first_sentence(text: str) -> str:
    return sentences(text)[0]


def opening_phrase(sentence: str) -> str:
    m = _OPENING_VERB.search(sentence)
    return sentence[: m.start()] if m else sentence


def _strip_known(phrase: str, question: str) -> str:
    """Drop leading articles and leading words the question already says: "A thermal conductivity
    of zero" asked as "the thermal conductivity of Frostite" -> "zero"; "Walls of double thickness"
    -> "double thickness". A leading "The" survives unless the question says it (names keep it)."""
    known = {_stem(w) for w in content_words(question)}
    words = phrase.split()
    dropped = False
    while words:
        w = words[0].lower().strip(",")
        if w in ("a", "an") or _stem(w) in known or (dropped and w in ("of", "with", "the")):
            words.pop(0)
            dropped = dropped or w not in ("a", "an")
            continue
        break
    # Cut at the first later word the question already contains ("pale violet glow under moonlight").
    for i, w in enumerate(words[1:], start=1):
        if _stem(w.strip(",")) in known and w.lower() not in _STOP:
            words = words[:i]
            break
    return " ".join(words)


def measured_value(sentence: str, question: str, with_unit: bool) -> str | None:
    """The first number the question does not state, with its unit words when asked for."""
    stated = set(re.findall(_NUMBER, question))
    for m in re.finditer(_NUMBER, sentence):
        if m.group() in stated:
            continue
        if not with_unit:
            return m.group()
        unit = []
        for w in sentence[m.end():].split()[:6]:
            bare = w.strip(",;().")
            if not bare or bare.lower() in _UNIT_STOP:
                break
            unit.append(bare)
            if bare != w:  # punctuation closes the value: "5,959 meters (19,551 feet)", "800 km/h."
                break
        return " ".join([m.group(), *unit])
    return None


def extract_answer(question: str, hint: str, text: str) -> str | None:
    """The answer phrase of a reference document, or None when the reader finds nothing."""
    sentence = first_sentence(text)
    q = question.lower()
    hint_words = set(_words(hint))
    m = re.match(r"which continent is (.+) in\?", q)
    if m:
        c = re.search(r"(?:located in|part of|lies in|situated in)\s+((?:[A-Z][a-z]+)(?:\s+[A-Z][a-z]+)*)", sentence)
        return c.group(1) if c else None
    if hint_words & _NUMERIC_HINTS:
        return measured_value(sentence, question, with_unit=False)
    if hint_words & _MEASURE_HINTS and re.search(_NUMBER, sentence):
        return measured_value(sentence, question, with_unit=True)
    # An apposition ends the answer: "The Wright brothers, Orville and Wilbur Wright, are ...".
    phrase = opening_phrase(sentence).split(", ")[0].strip()
    if any(q.startswith(r) for r in _REAL_RELATIONS):
        return re.sub(r"^(?:The|A|An)\s+", "", phrase) or None
    # The hint's own nouns are not part of the answer: "iridescent blue-white coloration" asked
    # as "Return the coloration description only".
    phrase = _strip_known(phrase, question + " " + " ".join(hint_words - _HINT_NOISE))
    if hint_words & {"feature", "description"}:
        cut = _FEATURE_CUT.search(" " + phrase + " ")
        if cut:
            phrase = (" " + phrase + " ")[: cut.start()].strip()
    return phrase or None


def answer_question(question: str, hint: str, call: CallFn) -> str:
    hits = find_documents(question, call)
    for hit in hits[:READS_PER_HOP]:
        answer = extract_answer(question, hint, read(hit["id"], call))
        if answer:
            return answer
    raise OracleParseError("no answer phrase found in the top documents")


def solve(task: Task, call: CallFn) -> str:
    question, hint = split_instruction(task.instruction)
    return answer_question(question, hint, call)


# ----------------------------------------------------------------------------- multi-hop

_STEP = re.compile(r"Step \d+:\s*(.*?)\s*Call the answer ([a-z])\.", re.DOTALL)


def parse_steps(instruction: str) -> list[tuple[str, str]]:
    """[(question, variable), ...] of "Step 1: Q1 Call the answer x. Step 2: ..."."""
    steps = [(q.strip(), var) for q, var in _STEP.findall(instruction)]
    if not steps:
        raise OracleParseError("no 'Step N: ... Call the answer v.' in the instruction")
    return steps


def substitute(question: str, values: dict[str, str]) -> str:
    for var, value in values.items():
        question = re.sub(rf"\b{var}\b", lambda _m, v=value: v, question)
    return question


_CAPITALISED = re.compile(
    r"[A-Z][\w'\-.]*(?:\s+(?:(?:of|the|de|da|del|van|von|upon|la|le)\s+)*[A-Z][\w'\-.]*)*(?:,\s*D\.C\.)?"
)
_NUMERIC_QUESTION = re.compile(
    r"(how (many|much|far|tall|long|old|high|deep|big|heavy|wide)|in (which|what) year|when)\b")
_PLAIN_NUMBER_QUESTION = ("how many", "in which year", "in what year", "when")


def _names(sentence: str, known: set[str]) -> list[re.Match]:
    """Capitalised phrases of ``sentence`` that say something the question does not."""
    out = []
    for m in _CAPITALISED.finditer(sentence):
        stems = {_stem(w) for w in content_words(m.group())}
        if stems and not stems <= known:
            out.append(m)
    return out


def generic_answer(question: str, text: str, title: str = "") -> str | None:
    """Multi-hop reader. A single-hop style reference document ("... reference" title) is read with
    the single-hop reader. Otherwise, sentences are tried by how many words they share with the
    question: a number (with its unit unless counting or dating) for how-many/how-far/what-year
    questions or measures, else the first capitalised phrase the question does not contain; for a
    country question "born in Bonn, Germany" yields the later phrase of such a pair."""
    q = question.lower()
    known = {_stem(w) for w in content_words(question)}
    if title.endswith(" reference"):
        answer = extract_answer(question, "", text)
        if answer and not {_stem(w) for w in content_words(answer)} <= known:
            return answer
    relation = {_stem(w) for w in content_words(question.lower())} - {
        _stem(w) for w in _TOKEN.findall(question) if w[0].isupper()}

    def overlap(sentence: str) -> int:
        # Relation words ("capital", "born") count double: the subject is in most sentences.
        stems = {_stem(w) for w in content_words(sentence)}
        return len(known & stems) + len(relation & stems)

    ranked = sorted(sentences(text), key=overlap, reverse=True)
    numeric = _NUMERIC_QUESTION.match(q) is not None or bool(set(_words(q)) & _MEASURE_HINTS)
    for sentence in ranked:
        if numeric:
            value = measured_value(sentence, question, with_unit=not q.startswith(_PLAIN_NUMBER_QUESTION))
            if value:
                return value
        names = _names(sentence, known)
        if not names:
            continue
        pick = names[0]
        if {"country", "nation"} & set(_words(q)):
            for a, b in zip(names, names[1:]):
                if sentence[a.end(): b.start()].strip() == ",":
                    pick = b
                    break
        return _clean_name(pick.group())
    # No name anywhere: the opening phrase of the best sentence ("The blue whale is ...").
    opening = re.sub(r"^(?:The|A|An)\s+", "", opening_phrase(ranked[0]).split(", ")[0].strip()) if ranked else ""
    if opening and not {_stem(w) for w in content_words(opening)} <= known:
        return opening
    return None


def _clean_name(name: str) -> str:
    name = re.sub(r"^The\s+", "", name.strip(" ,"))
    name = re.sub(r"'s$", "", name)
    if name.endswith(".") and not re.search(r"\b[A-Z]\.$", name):  # keep "D.C."
        name = name[:-1]
    return name


def solve_multihop(task: Task, call: CallFn) -> str:
    values: dict[str, str] = {}
    answer = None
    for question, var in parse_steps(task.instruction):
        question = substitute(question, values)
        answer = None
        hits = find_documents(question, call)
        for i, hit in enumerate(hits[:READS_PER_HOP]):
            if i and title_overlap(question, hit["title"])[1] == 0:
                break  # a second read only for a document that looks relevant
            answer = generic_answer(question, read(hit["id"], call), hit["title"])
            if answer:
                break
        if not answer:
            raise OracleParseError(f"no answer found for step {question!r}")
        values[var] = answer
    return answer


SOLVERS = {("RetrieverEnv", False): solve, ("RetrieverEnv", True): solve_multihop}
