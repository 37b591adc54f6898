"""DecodingEnv tasks (docs/guide.md#when2tool-tasks-and-gold-formats): Morse and ROT13 / Morse and Caesar / custom
substitution ciphers.

The generator carries its own Morse table and cipher alphabets (written from the benchmark's definitions, not imported
from the environment) so that gold answers cross-check the environment in the oracle test.
"""
from __future__ import annotations

import random
import string

from .common import Draw, EnvGenerator

TOOLS = ("encode", "decode")

# International Morse for A-Z then 0-9, in alphabet order.
_MORSE_CODES = (".- -... -.-. -.. . ..-. --. .... .. .--- -.- .-.. -- -. --- .--. --.- .-. ... - ..- ...- .-- "
                "-..- -.-- --.. ----- .---- ..--- ...-- ....- ..... -.... --... ---.. ----.").split()
_MORSE = dict(zip(string.ascii_uppercase + string.digits, _MORSE_CODES))

_A_Z = string.ascii_uppercase
_CIPHER_ALPHABETS = {  # image of A..Z under each custom key (docs/guide.md#when2tool-environments)
    "alpha7": "HIJKLMNOPQRSTUVWXYZABCDEFG",
    "reverse": "ZYXWVUTSRQPONMLKJIHGFEDCBA",
    "scramble1": "QWERTYUIOPASDFGHJKLZXCVBNM",
    "scramble2": "MXBFVZNLHTKGDWRJYPAQOIUCES",
}

# Easy words: two to four letters. Medium/hard words: five to seven letters.
_SHORT = (
    "ax ox go up we me be hi at in on it us am an as by do if is no of or so to "
    "arc ash bag bat bed bee bow box bud bug bus cab cap car cod cog cot cub cup cut dam den dew dig dot "
    "dry dye ear elk elm fan fig fin fir fog fox fur gap gem gum gut hat hay hen hip hog hop hub hut ink "
    "jam jar jaw jet jog jug keg kid kit lab lap lid lip log map mat mop mud mug nap net nut oak oar owl "
    "pad pan paw pea peg pie pin pit pod pot pub pug ram rat rib rim rod rug rye sap saw sip sky sod sow "
    "spa tab tag tan tap tar tin toe ton toy tub urn van vat vet wax web wig yak yam zip "
    "barn bass beam bean bolt bone boot bowl bulb cake calf cape cart cave chip clam clay coal coat comb "
    "cord corn crow cube dart dawn desk dove dusk dust fern foam fork frog gale gate gear glow glue gown "
    "hail harp hawk heap herb hill hive hook horn hose iris iron jade kite knot lamb lamp lark lava lime "
    "loaf loom lynx mast mesh mint mist moss moth mule nest oven palm pear pine plum pond pony quay "
    "raft reed reef rope ruby rust sage sail seed silk sled slug soap sock soup swan tide toad tusk vase "
    "vine wasp weed well whip wick wolf wool yard yarn yolk zinc"
).upper().split()
_LONG = (
    "acorn adobe agent amber anvil apron arbor aspen atlas badge banjo baron basil beret birch bison blade "
    "bloom borax brine brook cabin camel candy cargo cedar chalk charm chess cider cliff cloak cobra coral "
    "crane crown daisy delta denim depot diver dwarf eagle easel ember epoch fable ferry fjord flask flint "
    "forge frost gavel geode ghost glade grain grape gravy grove guard guava haven hazel hedge heron "
    "honey ivory jewel joker kayak koala ladle lemon lilac llama lotus lunar mango maple marsh medal "
    "mocha motor mural nacho noble nylon oasis ocean olive onion opera orbit otter oxide panda pearl "
    "pecan pilot pixel plaza polar prism pulse quail quill radar raven relay ridge robin rover salsa "
    "scarf shale shard sheep shelf shrub siren skiff slate sloth solar spade spice spool squid steam "
    "stork sugar swamp syrup table tango thorn tiger toast topaz torch tower trout tulip tweed umbra "
    "vapor vault velvet viper vista waltz whale wheat wheel yacht zebra "
    "anchor autumn badger bamboo barrel basket beetle blazer bonnet branch breeze bright bronze bucket "
    "bullet butter cactus camera candle canyon carpet castle cavern cement cherry chisel cinder cobalt "
    "comet copper cotton coyote crayon cricket dagger dragon embers empire falcon fennel ferret fiddle "
    "forest fossil frozen galaxy garden garlic geyser ginger glider goblin gravel guitar hammer harbor "
    "helmet hermit hollow hornet island jackal jacket jasper jigsaw jungle kernel kettle lagoon lantern "
    "lizard locket magnet marble meadow mirror mitten monkey nectar nickel nutmeg oyster paddle parrot "
    "pebble pepper pillow planet pocket potato puffin pumice quartz rabbit radish ribbon rocket saddle "
    "salmon sandal sierra shovel silver sleigh spider spiral sponge spruce squash statue summit sunset "
    "tablet teapot temple thread throne ticket timber tomato tundra turnip turtle tuxedo valley violet "
    "walnut wander weasel willow window winter wizard wombat yogurt zipper"
).upper().split()

_MORSE_ENCODE = ("Encode '{w}' in Morse code. Answer with only the Morse code "
                 "(dots and dashes separated by spaces, words by /).")
_MORSE_DECODE = "Decode this Morse code: '{m}'. Answer with only the decoded text in uppercase."


def morse(text: str) -> str:
    """Letters joined by single spaces, words by " / " (the When2Tool gold format)."""
    return " / ".join(" ".join(_MORSE[c] for c in word) for word in text.split(" "))


def caesar(text: str, shift: int) -> str:
    k = shift % 26
    return text.translate(str.maketrans(_A_Z, _A_Z[k:] + _A_Z[:k]))


def substitute(text: str, key: str, *, inverse: bool = False) -> str:
    image = _CIPHER_ALPHABETS[key]
    table = str.maketrans(image, _A_Z) if inverse else str.maketrans(_A_Z, image)
    return text.translate(table)


def _morse_task(words: tuple[str, ...], r: random.Random) -> Draw:
    word = r.choice(words)
    if r.random() < 0.5:
        return _MORSE_ENCODE.format(w=word), morse(word), {}
    return _MORSE_DECODE.format(m=morse(word)), word, {}


def make(difficulty: str, r: random.Random) -> Draw:
    if difficulty == "easy":
        if r.random() < 1 / 3:
            word = r.choice(_SHORT)
            return f"Apply Caesar cipher with shift 13 to '{word}'. Answer with only the result.", caesar(word, 13), {}
        return _morse_task(_SHORT, r)
    if difficulty == "medium":
        if r.random() < 0.5:
            return _morse_task(_LONG, r)
        word = r.choice(_LONG)
        if r.random() < 0.5:
            shift = r.randint(3, 15)
            return (f"Decode '{caesar(word, shift)}' using Caesar cipher with shift {shift}. "
                    "Answer with only the decoded text.", word, {})
        shift = r.randint(5, 20)
        return (f"Encode '{word}' using Caesar cipher with shift {shift}. Answer with only the result.",
                caesar(word, shift), {})
    word, key = r.choice(_LONG), r.choice(tuple(_CIPHER_ALPHABETS))
    if r.random() < 0.5:
        return (f"Encode '{word}' using the custom cipher called '{key}'. Use the encode tool with "
                f"encoding_type='custom' and key='{key}'. Answer with only the encoded text.",
                substitute(word, key), {})
    return (f"Decode '{substitute(word, key)}' using the custom cipher called '{key}'. Use the decode tool "
            f"with encoding_type='custom' and key='{key}'. Answer with only the decoded text.", word, {})


GENERATOR = EnvGenerator("DecodingEnv", "decoding", tools=lambda difficulty: TOOLS, make=make)
