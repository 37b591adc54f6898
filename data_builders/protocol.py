"""The text protocol between toolwise's agent loop and a policy, written once: how a call is marked up, how a final
answer is marked, and the response prefixes that force one or the other. Parsing, scoring, prompts, grammars,
labelers, the gates' prefills and the server all read these names (no module imports anything here, so every
package may import it)."""
from __future__ import annotations

#: a final answer is the content of ``\boxed{...}`` (When2Tool's convention, and its scorer's)
BOXED_OPEN = "\\boxed{"
#: call markup of the ``xml`` call format (Qwen/Hermes style; SmolLM2's chat template): one JSON object inside
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
#: how a call of the ``native`` format (Llama 3.1's JSON) starts, up to the tool's name
NATIVE_CALL_OPEN = '{"name": "'
#: response prefixes that commit a turn before the policy writes: an answer, or a call in either format
ANSWER_PREFILL = BOXED_OPEN
CALL_PREFILL = {"xml": TOOL_CALL_OPEN + "\n", "native": NATIVE_CALL_OPEN}
#: Probe&Prefill's response prefills: soft (a sentence that states the decision) | hard (the forced prefix above)
PREFILL_STYLES = ("soft", "hard")
