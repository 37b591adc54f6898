"""Engine selection, merged copies for weight-loading engines, and the OpenAI-compatible client's response
handling (against a scripted client; the real-server test is in test_vllm.py)."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from data_builders.backends import loading
from data_builders.backends.base import SamplingParams
from data_builders.backends.openai_backend import NoHiddenStates, OpenAIBackend


def test_unknown_backend_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown backend 'tgi'.*\['hf', 'openai', 'vllm'\]"):
        loading.backend_from_config({"name": "smollm2"}, {"name": "tgi"})


def test_vllm_backend_without_vllm_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)   # import vllm -> ImportError
    model = {"name": "smollm2", "adapter": None, "device": "cpu"}
    with pytest.raises(ImportError, match="install_vllm_cpu.sh"):
        loading.backend_from_config(model, {"name": "vllm"})


def _perturbed_adapter(tiny_model_dir, out):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    peft_model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(1)
    with torch.no_grad():
        for n, p in peft_model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)   # B starts at zero: make the adapter change the function
    peft_model.save_pretrained(out)
    return out


@pytest.mark.slow
def test_adapter_is_merged_into_a_cached_copy_with_the_same_function(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLWISE_CACHE", str(tmp_path / "cache"))
    adapter = str(_perturbed_adapter(tiny_model_dir, tmp_path / "adapter"))
    path, mid = loading.model_directory(str(tiny_model_dir), adapter=adapter)
    assert path.startswith(str(tmp_path / "cache" / "merged"))
    with_adapter = loading.load_backend(str(tiny_model_dir), adapter=adapter)
    merged = loading.load_backend(path, model_id=mid)
    assert mid == with_adapter.model_id
    ids = torch.tensor([[1, 5, 9, 200, 31]])
    with torch.no_grad():
        torch.testing.assert_close(merged.model(ids).logits, with_adapter.model(ids).logits, atol=1e-5, rtol=1e-5)
        plain = loading.load_backend(str(tiny_model_dir)).model(ids).logits
    assert not torch.allclose(plain, merged.model(ids).logits, atol=1e-3)
    # A second call reuses the copy; a retrained adapter at the same path gets a new one.
    assert loading.model_directory(str(tiny_model_dir), adapter=adapter) == (path, mid)
    (tmp_path / "adapter" / "adapter_config.json").write_text(
        (tmp_path / "adapter" / "adapter_config.json").read_text().replace('"r": 4', '"r": 4 '))
    assert loading.model_directory(str(tiny_model_dir), adapter=adapter)[0] != path


def test_plain_model_needs_no_copy(tiny_model_dir):
    assert loading.model_directory(str(tiny_model_dir)) == (str(tiny_model_dir), str(tiny_model_dir))


# ---------------------------------------------------------------------------- OpenAI-compatible client
class ScriptedClient:
    """Stands in for openai.OpenAI: records requests, answers from a script of choice dicts."""

    def __init__(self, answer):
        self.requests = []
        self.answer = answer
        self.models = SimpleNamespace(list=lambda: [SimpleNamespace(id="served-model")])
        self.completions = SimpleNamespace(create=self._create)

    def _create(self, **kw):
        self.requests.append(kw)
        choices = [SimpleNamespace(index=i, model_dump=lambda d=d: d) for i, d in enumerate(self.answer(kw))]
        return SimpleNamespace(choices=choices[::-1])   # out of order on purpose


@pytest.fixture
def tok_dir(tiny_model_dir):
    return str(tiny_model_dir)


def test_openai_backend_vllm_extras_maps_stop_reasons(tok_dir):
    def answer(kw):
        return [{"text": 'x<tool_call>{"a": 1}</tool_call>', "finish_reason": "stop", "stop_reason": "</tool_call>",
                 "token_ids": [5, 6, 7], "logprobs": {"token_logprobs": [-0.1, -0.2, -0.3]}},
                {"text": "done", "finish_reason": "stop", "stop_reason": None, "token_ids": [8, 2],
                 "logprobs": {"token_logprobs": [-0.5, -0.01]}},
                {"text": "long", "finish_reason": "length", "stop_reason": None, "token_ids": [9, 9],
                 "logprobs": {"token_logprobs": [-1.0, -1.0]}}]

    client = ScriptedClient(answer)
    b = OpenAIBackend(base_url="http://x/v1", tokenizer=tok_dir, client=client)
    assert b.served_model == "served-model" and b.fingerprint == "openai:served-model@http://x/v1"
    prompts = ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "a", "b"]
    gens = b.generate(prompts, SamplingParams(max_new_tokens=7, stop=("</tool_call>",)), return_logprobs=True)
    assert [g.finish_reason for g in gens] == ["stop", "eos", "length"]
    assert gens[0].token_ids == [5, 6, 7] and gens[1].logprobs == [-0.5, -0.01]
    req = client.requests[0]
    assert req["prompt"][0] == b.tokenizer(prompts[0], add_special_tokens=False).input_ids   # token ids, no BOS added
    assert req["stop"] == ["</tool_call>"] and req["extra_body"]["include_stop_str_in_output"] is True
    assert gens[0].prompt_tokens == b.count_tokens(prompts[0])


def test_openai_backend_plain_server_cuts_the_stop_string_itself(tok_dir):
    def answer(kw):
        assert "stop" not in kw and isinstance(kw["prompt"][0], str)
        return [{"text": 'call <tool_call>{"a": 1}</tool_call> and more', "finish_reason": "length"},
                {"text": "The answer.", "finish_reason": "stop"}]

    b = OpenAIBackend(base_url="http://x/v1", tokenizer=tok_dir, model="m", client=ScriptedClient(answer),
                      vllm_extras=False)
    gens = b.generate(["p", "q"], SamplingParams(stop=("</tool_call>",)))
    assert gens[0].text == 'call <tool_call>{"a": 1}</tool_call>' and gens[0].finish_reason == "stop"
    assert gens[0].token_ids == b.tokenizer(gens[0].text, add_special_tokens=False).input_ids
    assert gens[1].finish_reason == "eos"


def test_openai_backend_chunks_requests_and_checks_counts(tok_dir):
    client = ScriptedClient(lambda kw: [{"text": "ok", "finish_reason": "stop", "token_ids": [1]}] * len(kw["prompt"]))
    b = OpenAIBackend(base_url="http://x/v1", tokenizer=tok_dir, model="m", client=client, max_concurrency=2)
    assert len(b.generate(["a", "b", "c", "d", "e"])) == 5
    assert [len(r["prompt"]) for r in client.requests] == [2, 2, 1]
    short = OpenAIBackend(base_url="http://x/v1", tokenizer=tok_dir, model="m",
                          client=ScriptedClient(lambda kw: [{"text": "", "finish_reason": "stop"}]))
    with pytest.raises(RuntimeError, match="returned 1 completions for 2 prompts"):
        short.generate(["a", "b"])


def test_openai_backend_has_no_probe(tok_dir):
    b = OpenAIBackend(base_url="http://x/v1", tokenizer=tok_dir, model="m", client=ScriptedClient(lambda kw: []))
    with pytest.raises(NoHiddenStates, match="backend=hf or backend=vllm"):
        b.prefill(["p"])
