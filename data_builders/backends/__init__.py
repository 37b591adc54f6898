"""The engines (HF, vLLM, OpenAI-compatible) behind one Backend interface, and how a model is loaded
(``loading.py``). This module stays import-light: the configs read its names."""

#: the weight dtypes a model loads in (``model.dtype``; ``auto`` picks one per device: loading.resolve_dtype)
DTYPES = ("float32", "bfloat16", "float16")
