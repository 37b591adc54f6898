"""What a deployed agent imports: the controller hooks (and the runtime API) that load an exported
controller and decide, and ``serve/``, the gated OpenAI-compatible endpoint. Needs torch and the featurizers;
never Lightning or TRL.

Serving is its own package, not part of data building: it imports ``data_builders`` (featurizers, the agent's
prompts and parsing) and ``controllers``, never ``trainers``; ``data_builders`` never imports it."""
