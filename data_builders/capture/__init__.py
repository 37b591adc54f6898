"""Captured traffic (the endpoint's and the LiteLLM guardrail's ``capture.dir``) as decision points: the records'
reader and their decision moments (``records``), and the replay that labels those moments without gold answers
(``replay``; ``python -m data_builders.build source=capture capture.dir=... kind=...``)."""
