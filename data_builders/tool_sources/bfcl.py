# Parts of this file are adapted from the Berkeley Function Calling Leaderboard, bfcl-eval 2026.3.23
# (https://github.com/ShishirPatil/gorilla/tree/main/berkeley-function-call-leaderboard), files
# bfcl_eval/model_handler/utils.py (convert_to_tool, _cast_to_openai_type), bfcl_eval/utils.py
# (_func_doc_language_specific_pre_processing) and bfcl_eval/constants/type_mappings.py (GORILLA_TO_OPENAPI).
# Copyright the Gorilla / BFCL authors, licensed under the Apache License, Version 2.0
# (http://www.apache.org/licenses/LICENSE-2.0). Changes: only the Python-language, OpenAI-Completions path is kept.
"""BFCL's functions as a tool source: documentation a model calls, never code that runs.

Spec::

    {"kind": "bfcl", "functions": [<BFCL function docs>]}

BFCL's single-turn categories (irrelevance, simple_python, multiple) score the call a model writes against
possible answers and never execute it: the functions have no implementation. So every call to an offered tool
gets the same neutral text (:data:`RECORDED_MESSAGE`) as a success. The call is then recorded as executed (the
``bfcl_ast`` scorer reads an episode's executed calls) and the model is asked to reply to the user, with nothing
that tells it whether its call was right. Arguments are not checked here: judging them is the scorer's job, and an
error message would be a hint the benchmark never gives.

``tools()`` are the functions exactly as BFCL shows them to an OpenAI-style function-calling model
(:func:`openai_tools`): the Python-syntax note appended to each description, then ``convert_to_tool`` with
``GORILLA_TO_OPENAPI`` and the OpenAI-Completions style: a ``.`` in a name becomes ``_`` (OpenAI's names allow
neither), the ``parameters`` type becomes ``object`` and BFCL's parameter types their JSON-schema names (``float``
is ``number`` with ``format: float`` and a note in the description, ``dict`` is ``object``, ``tuple`` ``array``,
``any`` ``string``). :func:`original_names` maps a converted name back, so that the checker sees the name the
possible answers use.
"""
from __future__ import annotations

import copy
import re
import time
from typing import Any

from .base import ToolResult, ToolSource, failure, object_arguments

# The text every call reads back. Neutral on purpose: it neither confirms nor questions the call.
RECORDED_MESSAGE = ("The function call was recorded. This function returns no result here; do not call it again. "
                    "Reply to the user now.")

# bfcl_eval.utils._get_language_specific_hint for a Python category (all three supported ones are)
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."

# bfcl_eval/constants/type_mappings.py, GORILLA_TO_OPENAPI, as published
GORILLA_TO_OPENAPI = {
    "integer": "integer", "number": "number", "float": "number", "string": "string", "boolean": "boolean",
    "bool": "boolean", "array": "array", "list": "array", "dict": "object", "object": "object", "tuple": "array",
    "any": "string", "byte": "integer", "short": "integer", "long": "integer", "double": "number",
    "char": "string", "ArrayList": "array", "Array": "array", "HashMap": "object", "Hashtable": "object",
    "Queue": "array", "Stack": "array", "Any": "string", "String": "string", "Bigint": "integer",
}


def openai_name(name: str) -> str:
    """A BFCL function name as OpenAI-style models see it (BFCL's ``re.sub(r"\\.", "_", name)``)."""
    return re.sub(r"\.", "_", name)


def original_names(functions: list[dict]) -> dict[str, str]:
    """Converted name -> BFCL name, for the functions of one record."""
    return {openai_name(f["name"]): f["name"] for f in functions}


def _cast_to_openai_type(properties: dict, mapping: dict) -> dict:
    # bfcl_eval.model_handler.utils._cast_to_openai_type, line for line (its nesting limits included: what it
    # does not convert, the model does not see converted either)
    for key, value in properties.items():
        if "type" not in value:
            properties[key]["type"] = "string"
        else:
            var_type = value["type"]
            if mapping == GORILLA_TO_OPENAPI and var_type == "float":
                properties[key]["format"] = "float"
                properties[key]["description"] += " This is a float type value."
            if var_type in mapping:
                properties[key]["type"] = mapping[var_type]
            else:
                properties[key]["type"] = "string"
        if properties[key]["type"] == "array" or properties[key]["type"] == "object":
            if "properties" in properties[key]:
                properties[key]["properties"] = _cast_to_openai_type(properties[key]["properties"], mapping)
            elif "items" in properties[key]:
                properties[key]["items"]["type"] = mapping[properties[key]["items"]["type"]]
                if properties[key]["items"]["type"] == "array" and "items" in properties[key]["items"]:
                    properties[key]["items"]["items"]["type"] = mapping[properties[key]["items"]["items"]["type"]]
                elif properties[key]["items"]["type"] == "object" and "properties" in properties[key]["items"]:
                    properties[key]["items"]["properties"] = _cast_to_openai_type(
                        properties[key]["items"]["properties"], mapping)
    return properties


def openai_tools(functions: list[dict]) -> list[dict]:
    """BFCL function docs as OpenAI function-tool schemas, converted as BFCL converts them for an
    OpenAI-Completions model (the module docstring); ``functions`` is not modified."""
    out = []
    for item in copy.deepcopy(functions):
        item["description"] = item["description"] + PYTHON_HINT
        if "." in item["name"]:
            item["name"] = openai_name(item["name"])
        item["parameters"]["type"] = "object"
        item["parameters"]["properties"] = _cast_to_openai_type(item["parameters"]["properties"],
                                                                GORILLA_TO_OPENAPI)
        out.append({"type": "function", "function": item})
    return out


def check_functions(functions: Any) -> str:
    """What is wrong with a record's function docs ("" if nothing): each needs a name, a description and
    ``parameters`` with ``properties``, and the converted names must stay distinct."""
    if not isinstance(functions, list) or not functions:
        return f"expected a non-empty list of function docs, got {type(functions).__name__}"
    for i, f in enumerate(functions):
        if not (isinstance(f, dict) and isinstance(f.get("name"), str) and f["name"]):
            return f"functions[{i}]: a function doc needs a name"
        if not isinstance(f.get("description"), str):
            return f"functions[{i}] ({f['name']}): a function doc needs a description"
        params = f.get("parameters")
        if not (isinstance(params, dict) and isinstance(params.get("properties"), dict)):
            return f"functions[{i}] ({f['name']}): parameters.properties must be an object"
    names = [openai_name(f["name"]) for f in functions]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        # two functions a model could not tell apart, and a call the scorer could not map back
        return f"functions whose names collide once '.' becomes '_': {twice}"
    return ""


class BFCLSource(ToolSource):
    kind = "bfcl"

    def __init__(self, functions: list[dict]):
        problem = check_functions(functions)
        if problem:
            raise ValueError(f"bfcl source: field 'functions': {problem}")
        try:
            self._tools = openai_tools(functions)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"bfcl source: field 'functions': BFCL's conversion fails on them: "
                             f"{type(exc).__name__}: {exc}") from None
        self._names = {t["function"]["name"] for t in self._tools}

    def tools(self) -> list[dict]:
        return copy.deepcopy(self._tools)

    def _call(self, name: str, arguments: Any, started: float) -> ToolResult:
        if not isinstance(name, str) or name not in self._names:
            return failure("unknown_tool", f"unknown tool {name!r}; available: {', '.join(sorted(self._names))}",
                           started=started)
        arguments = object_arguments(arguments, started)
        if isinstance(arguments, ToolResult):
            return arguments
        return ToolResult(content=RECORDED_MESSAGE, ok=True, wall_s=time.monotonic() - started)
