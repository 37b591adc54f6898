"""RegexMatchEnv tasks (docs/guide.md#when2tool-tasks-and-gold-formats): what ``re.findall`` (or ``re.search``) returns.

Easy: ``findall`` or ``search`` with a simple pattern on a short text. Medium: ``findall`` with
groups, alternations and lookarounds. Hard: ``findall`` on a long generated text (key=value
pairs, overlapping lookahead captures, paired HTML-like tags, letters before digits in noise).
The instruction wording follows When2Tool's three templates.

The gold is built together with the text, never by running the pattern: each template places the
tokens that must match (and distractors that must not) and writes down what it placed, so the
oracle test, which runs the real pattern through the environment, checks the two against each
other. ``str()`` of the gold list gives Python's list/tuple formatting.
"""
from __future__ import annotations

import random
import string
from typing import Callable

from .common import Draw, EnvGenerator

TOOLS = ("regex_match",)

# Plain lowercase words, none ending in any suffix below and none shorter than 3 letters.
PLAIN = ("cat", "dog", "sun", "map", "cup", "box", "hat", "pen", "sky", "tree", "bird", "fish", "lamp",
         "road", "door", "milk", "rain", "wind", "salt", "gold", "star", "moon", "rock", "leaf")
SUFFIX_WORDS = {
    "ing": ("running", "jumping", "singing", "reading", "walking", "cooking", "dancing", "writing"),
    "ed": ("walked", "jumped", "played", "cooked", "opened", "painted", "listed", "stopped"),
    "ly": ("quickly", "slowly", "happily", "softly", "calmly", "boldly", "kindly", "gently"),
    "ful": ("helpful", "joyful", "careful", "painful", "hopeful", "playful", "useful", "graceful"),
    "ness": ("kindness", "darkness", "sadness", "fitness", "softness", "boldness", "illness", "madness"),
    "tion": ("nation", "action", "motion", "station", "fiction", "portion", "caution", "mention"),
    "able": ("readable", "washable", "stable", "capable", "portable", "durable", "likable", "notable"),
}
NAMES = ("Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Irene", "Jack", "Laura", "Mike")
ACRONYMS = ("NASA", "FBI", "USA", "CPU", "GPS", "HTML", "UN", "EU", "API", "DNA", "IBM", "BBC")
DOMAINS = ("gmail", "yahoo", "mail", "site", "test", "example", "corp", "host")
TLDS = ("com", "org", "net", "io", "edu")
USERS = ("user", "admin", "info", "sales", "bob", "alice", "dev", "team")
EXTS = ("txt", "png", "pdf", "csv", "json", "py")
FILES = ("file", "image", "doc", "report", "data", "notes", "main", "photo")
KEYS = ("name", "age", "city", "role", "team", "level", "mode", "size")

Template = Callable[[random.Random], tuple[str, str, object]]  # (pattern, text, gold) ; gold: list or str


def _mix(r: random.Random, hits: list[str], misses: list[str]) -> tuple[list[str], list[str]]:
    """Shuffle hits among misses; return (all tokens in order, the hits in text order)."""
    tokens = [(w, True) for w in hits] + [(w, False) for w in misses]
    r.shuffle(tokens)
    return [w for w, _ in tokens], [w for w, hit in tokens if hit]


# --------------------------------------------------------------------------- easy

def _e_suffix(r):
    suffix = r.choice(sorted(SUFFIX_WORDS))
    misses = [w for w in r.sample(PLAIN, r.randint(1, 2))]
    tokens, gold = _mix(r, r.sample(SUFFIX_WORDS[suffix], r.randint(1, 3)), misses)
    return rf"\b\w+{suffix}\b", " ".join(tokens), gold


def _e_digits(r):
    nums = [str(r.randint(0, 999)) for _ in range(r.randint(1, 3))]
    tokens, gold = _mix(r, nums, r.sample(PLAIN, r.randint(1, 3)))
    return r"\d+", " ".join(tokens), gold


def _e_capitalized(r):
    tokens, gold = _mix(r, r.sample(NAMES, r.randint(1, 3)), r.sample(PLAIN, r.randint(1, 3)))
    return r.choice([r"[A-Z][a-z]+", r"\b[A-Z]\w*"]), " ".join(tokens), gold


def _e_vowels(r):
    word = r.choice(PLAIN + tuple(w for ws in SUFFIX_WORDS.values() for w in ws))
    return r"[aeiou]", word, [c for c in word if c in "aeiou"]


def _e_length(r):
    k = r.choice([3, 4, 5])
    words = r.sample(PLAIN + NAMES, r.randint(3, 6))
    return rf"\b\w{{{k}}}\b", " ".join(words), [w for w in words if len(w) == k]


def _e_acronyms(r):
    tokens, gold = _mix(r, r.sample(ACRONYMS, r.randint(1, 3)), r.sample(PLAIN, r.randint(1, 2)))
    return r"[A-Z]+", " ".join(tokens), gold


def _e_emails(r):
    pairs = [f"{r.choice(USERS)}@{r.choice(DOMAINS)}" for _ in range(r.randint(2, 3))]
    if r.random() < 0.5:
        return r"\w+@\w+", " ".join(pairs), pairs
    return r"(?<=@)\w+", " ".join(pairs), [p.split("@")[1] for p in pairs]


def _e_files(r):
    names = r.sample(FILES, r.randint(2, 3))
    return r"\w+(?=\.)", " ".join(f"{n}.{r.choice(EXTS)}" for n in names), names


def _e_dash_pairs(r):
    pairs = [f"{r.randint(10, 99)}-{r.randint(10, 99)}" for _ in range(r.randint(2, 3))]
    return r"\d{2}-\d{2}", " and ".join(pairs), pairs


def _e_search(r):
    kind = r.randrange(4)
    words = r.sample(PLAIN, 2)
    if kind == 0:
        name = r.choice(NAMES)
        return r"^[A-Z]", f"{name} {words[0]}", name[0]
    if kind == 1:
        n = str(r.randint(1, 9999))
        return r"\d+$", f"{words[0]} {n}", n
    if kind == 2:
        return f"^{words[0]}", f"{words[0]} {words[1]}", words[0]
    return f"{words[1]}$", f"{words[0]} {words[1]}", words[1]


EASY: tuple[Template, ...] = (_e_suffix, _e_suffix, _e_digits, _e_capitalized, _e_vowels, _e_length, _e_acronyms,
                              _e_emails, _e_files, _e_dash_pairs, _e_search)


# --------------------------------------------------------------------------- medium

def _m_email_groups(r):
    triples = [(r.choice(USERS), r.choice(DOMAINS), r.choice(TLDS)) for _ in range(r.randint(2, 3))]
    text = " and ".join(f"{u}@{d}.{t}" for u, d, t in triples)
    if r.random() < 0.5:
        return r"(\w+)@(\w+)\.(\w+)", text, triples
    return r"(?<=@)\w+\.\w+", text, [f"{d}.{t}" for _, d, t in triples]


def _m_key_value(r):
    keys = r.sample(KEYS, r.randint(2, 4))
    pairs = [(k, str(r.randint(1, 99)) if r.random() < 0.5 else r.choice(NAMES)) for k in keys]
    return r"(\w+)=(\w+)", " ".join(f"{k}={v}" for k, v in pairs), pairs


def _m_dates(r):
    dates = [(str(r.randint(1990, 2030)), f"{r.randint(1, 12):02d}", f"{r.randint(1, 28):02d}")
             for _ in range(r.randint(2, 3))]
    text = "Dates: " + " and ".join("-".join(d) for d in dates)
    if r.random() < 0.5:
        return r"(\d+)-(\d+)-(\d+)", text, dates
    return r"\b\d{4}-\d{2}-\d{2}\b", text + " and 9-1-1", ["-".join(d) for d in dates]


def _m_before_lowercase(r):
    # Capitalized words directly followed by a space and a lowercase word.
    words, gold = [], []
    for _ in range(r.randint(4, 7)):
        words.append(r.choice(NAMES) if r.random() < 0.5 else r.choice(PLAIN))
    for i, w in enumerate(words[:-1]):
        if w[0].isupper() and words[i + 1][0].islower():
            gold.append(w)
    return r"[A-Z][a-z]+(?=\s[a-z])", " ".join(words), gold


def _m_ordinals(r):
    ords = []
    for _ in range(r.randint(3, 6)):
        n = r.randint(1, 40)
        suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
        ords.append(f"{n}{suffix}")
    tokens, gold = _mix(r, ords, [str(r.randint(1, 99)) for _ in range(r.randint(0, 2))])
    return r"\d+(?:st|nd|rd|th)", " ".join(tokens), gold


def _m_years(r):
    hits = [str(r.randint(1900, 2099)) for _ in range(r.randint(2, 4))]
    misses = [f"{r.choice([15, 16, 17, 18, 21, 22])}{r.randint(0, 99):02d}" for _ in range(r.randint(1, 2))]
    tokens, gold = _mix(r, hits, misses)
    return r"(?:19|20)\d{2}", "Years: " + " ".join(tokens), gold


def _m_suffix_alternation(r):
    suffixes = r.sample(["ing", "tion", "ness", "ly", "ful"], 3)
    hits = [r.choice(SUFFIX_WORDS[s]) for s in suffixes for _ in range(r.randint(0, 1))] or \
        [r.choice(SUFFIX_WORDS[suffixes[0]])]
    tokens, gold = _mix(r, hits, r.sample(PLAIN, r.randint(1, 3)))
    return rf"\b\w+(?:{'|'.join(suffixes)})\b", " ".join(tokens), gold


def _m_doubled_words(r):
    # Adjacent equal words (never three in a row); findall of (\w+) returns each doubled word once.
    words, gold = [], []
    for _ in range(r.randint(4, 6)):
        w = r.choice([x for x in PLAIN if not words or x != words[-1]])
        words.append(w)
        if r.random() < 0.5:
            words.append(w)
            gold.append(w)
    if not gold:
        words.append(words[-1])
        gold.append(words[-1])
    return r"\b(\w+)\s+\1\b", " ".join(words), gold


def _m_letter_runs(r):
    letters = r.sample(string.ascii_lowercase, r.randint(4, 6))
    runs = [c * r.randint(1, 5) for c in letters]
    return r"(\w)\1{2,}", " ".join(runs), [run[0] for run in runs if len(run) >= 3]


def _m_acronyms(r):
    tokens, gold = _mix(r, r.sample([a for a in ACRONYMS if len(a) >= 3], r.randint(2, 3)),
                        r.sample(PLAIN, r.randint(1, 3)) + ["Hi"])
    return r"[A-Z]{3,}", " ".join(tokens), gold


def _m_times(r):
    times = [f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}" for _ in range(r.randint(2, 3))]
    return r"\d{2}:\d{2}", "Meet at " + " or ".join(times) + f" not {r.randint(1, 9)}am", times


def _m_sums(r):
    pairs = [(str(r.randint(1, 99)), str(r.randint(1, 99))) for _ in range(r.randint(2, 3))]
    text = "Compute " + " and ".join(f"{a}{r.choice([' + ', '+'])}{b}" for a, b in pairs)
    return r"(\d+)\s*\+\s*(\d+)", text, pairs


MEDIUM: tuple[Template, ...] = (_m_email_groups, _m_key_value, _m_dates, _m_before_lowercase, _m_ordinals,
                                _m_years, _m_suffix_alternation, _m_doubled_words, _m_letter_runs, _m_acronyms,
                                _m_times, _m_sums)


# --------------------------------------------------------------------------- hard

TAGS = ("b", "i", "a", "p", "em", "div", "pre", "code", "span", "strong")
NOISE = string.ascii_lowercase + string.digits + "!@#$%^&*() "


def _h_query(r):
    pairs = [(f"k{r.randint(1, 99)}", f"v{r.randint(100, 999)}") for _ in range(r.randint(7, 21))]
    return r"(\w+)=(\w+)", "&".join(f"{k}={v}" for k, v in pairs), pairs


def _h_trigrams(r):
    text, length = "", r.randint(45, 55)
    while len(text) < length:
        i = r.randrange(6)
        text += "abcdef"[i:r.randint(i + 1, 6)]
    return r"(?=([a-z]{3}))", text, [text[i:i + 3] for i in range(len(text) - 2)]


def _h_tags(r):
    tags = [r.choice(TAGS) for _ in range(r.randint(3, 5))]
    parts = ["<%s>%s</%s>" % (t, "".join(r.choice("abcdefg ") for _ in range(r.randint(3, 10))), t) for t in tags]
    return r"<(\w+)>[^<]+</\1>", " ".join(parts), tags


def _h_letters_before_digit(r):
    text = "".join(r.choice(NOISE) for _ in range(60))
    gold, run = [], ""
    for c in text:  # maximal lowercase runs that end right before a digit
        if c in string.ascii_lowercase:
            run += c
        else:
            if run and c in string.digits:
                gold.append(run)
            run = ""
    return r"[a-z]+(?=\d)", text, gold


HARD: tuple[Template, ...] = (_h_query, _h_trigrams, _h_tags, _h_letters_before_digit)
TEMPLATES = {"easy": EASY, "medium": MEDIUM, "hard": HARD}


def make(difficulty: str, r: random.Random) -> Draw:
    pattern, text, gold = r.choice(TEMPLATES[difficulty])(r)
    if difficulty != "easy":
        instruction = f"What does re.findall(r'{pattern}', \"{text}\") return? Answer with only the Python list."
    elif isinstance(gold, str):  # a search: the matched string
        instruction = (f"What does the regex pattern r'{pattern}' match (search) in \"{text}\"? "
                       "Answer with only the matched string.")
    else:
        instruction = (f"What does the regex pattern r'{pattern}' find in the text \"{text}\" using findall? "
                       "Answer with only the Python list.")
    return instruction, str(gold), {}


GENERATOR = EnvGenerator("RegexMatchEnv", "regex_match", tools=lambda difficulty: TOOLS, make=make)
