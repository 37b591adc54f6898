"""PTE (arXiv 2604.05404): γ reproduces the paper's Table 3 from published configs, parameter counts match real
transformers models, PTE sums what the agent loop writes, and the hardware profiles (the ``recipes/hardware``
files, read into ``data_builders.metrics.hardware.PROFILES``) carry their sources. Offline, no weights."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

import recipes
from data_builders.agent.trajectory import Trajectory, TrajectoryError
from data_builders.metrics import hardware, pte
from data_builders.metrics.pte import gamma, gamma_for_backend, gamma_from_config, param_count, trajectory_pte
from tests.trajectories import make_trajectory, make_turn

# Published config.json values (Hugging Face hub, meta-llama/Llama-3.1-8B-Instruct, Qwen/Qwen2.5-7B-Instruct,
# HuggingFaceTB/SmolLM2-135M-Instruct), written out so the test needs no network.
LLAMA_31_8B = dict(model_type="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                   num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False,
                   attention_bias=False, mlp_bias=False)
QWEN25_7B = dict(model_type="qwen2", vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                 num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False)
SMOLLM2_135M = dict(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                    num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True)
PAPER = "h100_pcie_paper"


# ------------------------------------------------------------------------------------------- parameter counts
def test_param_counts_of_published_models():
    assert param_count(LLAMA_31_8B) == 8_030_261_248                       # Meta: "8B" (8.03B)
    assert param_count(QWEN25_7B) == 7_615_616_512                         # Qwen card: 7.61B
    assert param_count(QWEN25_7B, embeddings=False) == 6_525_621_760       # Qwen card: 6.53B non-embedding
    assert param_count(SMOLLM2_135M) == 134_515_008                        # SmolLM2-135M's model card: 134.5M
    assert round(param_count(SMOLLM2_135M) / 1e6, 1) == 134.5
    # tied embeddings count once; the non-embedding count drops them either way
    assert param_count(SMOLLM2_135M) - param_count(SMOLLM2_135M, embeddings=False) == 49152 * 576
    assert param_count(LLAMA_31_8B) - param_count(LLAMA_31_8B, embeddings=False) == 2 * 128256 * 4096


@pytest.mark.parametrize("model_type,extra", [
    ("llama", dict(attention_bias=True, mlp_bias=True)),
    ("qwen2", {}),                                     # q/k/v biases
    ("qwen3", dict(head_dim=16)),                      # head_dim ≠ d/heads, q/k norms
])
@pytest.mark.parametrize("tied", [False, True])
def test_param_count_matches_a_real_transformers_model(model_type, extra, tied):
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(model_type, vocab_size=101, hidden_size=48, intermediate_size=80,
                               num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
                               tie_word_embeddings=tied, **extra)
    with torch.device("meta"):                                  # shapes only, no memory
        model = AutoModelForCausalLM.from_config(cfg)
    total = sum(p.numel() for p in model.parameters())          # shared (tied) tensors are yielded once
    emb = model.get_input_embeddings().weight.numel()
    emb += 0 if tied else model.get_output_embeddings().weight.numel()
    assert param_count(cfg) == total
    assert param_count(cfg, embeddings=False) == total - emb


def test_param_count_refuses_what_it_cannot_count():
    with pytest.raises(NotImplementedError, match="mixture of experts"):
        param_count({**LLAMA_31_8B, "num_local_experts": 8})
    with pytest.raises(NotImplementedError, match="gpt2"):
        param_count({**LLAMA_31_8B, "model_type": "gpt2"})
    with pytest.raises(KeyError, match="intermediate_size"):
        param_count({k: v for k, v in LLAMA_31_8B.items() if k != "intermediate_size"})
    with pytest.raises(TypeError, match="transformers config"):
        param_count(object())


# ------------------------------------------------------------------------------------------- γ
def test_gamma_reproduces_the_papers_table_3():
    """Table 3 (= Table 1) of arXiv 2604.05404, H100-PCIe HOI 756.5. Its N_params column is the model card's:
    Qwen2.5-7B 6.53B *non-embedding*, Llama-3.1-8B 8.0B *total* (footnote 2); and it rounds the GQA-free γ
    to 3 decimals before the head ratio. With both, the printed values come out exactly."""
    llama = gamma_from_config(LLAMA_31_8B, PAPER, params="total", paper_rounding=True)
    qwen = gamma_from_config(QWEN25_7B, PAPER, params="non_embedding", paper_rounding=True)
    assert (llama, qwen) == (0.00625, 0.00329)
    # Without the intermediate rounding: within 1.3 % of the printed values.
    llama_exact = gamma_from_config(LLAMA_31_8B, PAPER, params="total")
    qwen_exact = gamma_from_config(QWEN25_7B, PAPER)                       # default: non-embedding
    assert llama_exact == pytest.approx(0.0061739, abs=1e-7) and llama_exact == pytest.approx(0.00625, rel=0.013)
    assert qwen_exact == pytest.approx(0.0033239, abs=1e-7) and qwen_exact == pytest.approx(0.00329, rel=0.013)
    # The explicit form, from the table's own columns
    assert gamma(32, 4096, 8.0e9, 756.5, 8, 32, paper_rounding=True) == 0.00625
    assert gamma(28, 3584, 6.53e9, 756.5, 4, 28, paper_rounding=True) == 0.00329


@pytest.mark.parametrize("n_layers,d_model,n_params,kv,q,printed", [
    (64, 5120, 31.0e9, 8, 40, 0.00320),    # Qwen2.5-32B (table prints the factor as 1/2; the γ uses 8/40)
    (80, 8192, 70.0e9, 8, 64, 0.00175),    # Qwen2.5-72B
    (64, 5120, 31.2e9, 8, 64, 0.00200),    # Qwen3-32B
    (80, 8192, 70.6e9, 8, 64, 0.00175),    # Llama-3.1-70B
    (48, 2048, 3.3e9, 4, 32, 0.00563),     # Qwen3-30B-A3B (active)
    (94, 4096, 22e9, 4, 64, 0.00163),      # Qwen3-235B-A22B (active)
    (46, 4096, 12e9, 8, 96, 0.00200),      # GLM-4.5-Air (active)
    (92, 5120, 32e9, 8, 96, 0.00183),      # GLM-4.5 (active)
    (36, 2880, 5.1e9, 8, 64, 0.00388),     # GPT-OSS-120B (active)
])
def test_gamma_reproduces_the_rest_of_table_3_from_its_columns(n_layers, d_model, n_params, kv, q, printed):
    assert gamma(n_layers, d_model, n_params, PAPER, kv, q, paper_rounding=True) == printed


def test_gqa_factor_and_hoi_scale_gamma_linearly():
    mha = gamma(32, 4096, 8e9, 756.5)
    assert mha == pytest.approx(2 * 32 * 4096 * 756.5 / 8e9)
    assert gamma(32, 4096, 8e9, 756.5, n_kv_heads=8, n_q_heads=32) == pytest.approx(mha / 4)
    assert gamma(32, 4096, 8e9, 756.5, 32, 32) == pytest.approx(mha)
    # config without num_key_value_heads = multi-head attention (transformers' convention)
    no_gqa = {k: v for k, v in LLAMA_31_8B.items() if k != "num_key_value_heads"}
    n = param_count(LLAMA_31_8B, embeddings=False)
    assert gamma_from_config(no_gqa, 756.5, n_params=n) == pytest.approx(
        4 * gamma_from_config(LLAMA_31_8B, 756.5, n_params=n))
    # the paper's hardware sweep: γ/γ_H100 = HOI ratio (its Table 2 α column)
    base = gamma_from_config(SMOLLM2_135M, PAPER)
    for name, alpha in [("h200_nvl_paper", 0.46), ("a100_pcie_paper", 0.43), ("rtx4090_paper", 0.43),
                        ("v100_sxm2_paper", 0.18)]:
        assert round(gamma_from_config(SMOLLM2_135M, name) / base, 2) == alpha
    # dense peaks halve γ on the devices whose paper figure is a sparsity peak
    assert gamma_from_config(SMOLLM2_135M, "h100_pcie_dense") == pytest.approx(base / 2)


def test_gamma_rejects_bad_input():
    with pytest.raises(ValueError, match="both n_kv_heads and n_q_heads"):
        gamma(32, 4096, 8e9, 756.5, n_kv_heads=8)
    with pytest.raises(ValueError, match="n_params"):
        gamma(32, 4096, 0, 756.5)
    with pytest.raises(ValueError, match="n_kv_heads <= n_q_heads"):
        gamma(32, 4096, 8e9, 756.5, 64, 32)
    with pytest.raises(KeyError, match="unknown hardware profile 'tpu'"):
        gamma(32, 4096, 8e9, "tpu")
    with pytest.raises(ValueError, match="params must be one of"):
        gamma_from_config(LLAMA_31_8B, PAPER, params="active")
    with pytest.raises(NotImplementedError, match="MLA"):
        gamma_from_config({**LLAMA_31_8B, "kv_lora_rank": 512}, PAPER)
    # MoE: fine once the active count is given
    moe = {**LLAMA_31_8B, "num_local_experts": 8}
    with pytest.raises(NotImplementedError, match="active"):
        gamma_from_config(moe, PAPER)
    assert gamma_from_config(moe, PAPER, n_params=8.0e9) == pytest.approx(gamma(32, 4096, 8.0e9, 756.5, 8, 32))


def test_gamma_for_backend_reads_the_model_config():
    from transformers import LlamaConfig

    cfg = LlamaConfig(**{k: v for k, v in SMOLLM2_135M.items() if k != "model_type"})
    expected = gamma_from_config(SMOLLM2_135M, PAPER)
    hf_like = SimpleNamespace(model=SimpleNamespace(config=cfg))          # HF: backend.model.config
    with_property = SimpleNamespace(config=cfg)                           # every toolwise backend: .config
    assert gamma_for_backend(hf_like) == pytest.approx(expected)
    assert gamma_for_backend(with_property, PAPER) == pytest.approx(expected)
    assert gamma_for_backend(SMOLLM2_135M, hardware.PROFILES[PAPER]) == pytest.approx(expected)   # a dict
    assert gamma_for_backend(cfg, "h100_sxm_dense") == pytest.approx(expected * 295.34328 / 756.5)
    # OpenAI-compatible backend without a local config: a clear error, not an AttributeError
    with pytest.raises(TypeError, match="exposes no model config"):
        gamma_for_backend(SimpleNamespace(config=None, served_model="x"))
    # PTEConfig: fixed γ bypasses the model; otherwise it asks the backend
    assert pte.PTEConfig(gamma=0.01).gamma_for() == 0.01
    assert pte.PTEConfig().gamma_for(hf_like) == pytest.approx(expected)
    assert pte.PTEConfig(hardware="h100_pcie_dense").gamma_for(cfg) == pytest.approx(expected / 2)
    with pytest.raises(TypeError, match="needs a backend"):
        pte.PTEConfig().gamma_for()


# ------------------------------------------------------------------------------------------- PTE
def _turn(prefill, new, context, decode, **extra):
    """One turn as the agent loop records it (data_builders/agent/loop.py, Agent._apply)."""
    return make_turn(extra.pop("round", 0), "…", prefill_tokens=prefill, new_tokens=new, context_len=context,
                     decode_tokens=decode, finish_reason="stop", wall_s=0.5, **extra)


# call → tool response (30 tokens) → call → tool response (20 tokens) → answer
TURNS = [_turn(100, 100, 100, 20, round=0),      # 100 prompt tokens, 20 generated
         _turn(150, 30, 150, 10, round=1),       # 100 + 20 + 30 new = 150
         _turn(180, 20, 180, 5, round=2)]        # 150 + 10 + 20 new = 180


def test_pte_by_hand_full_eviction_and_cache_reuse():
    g = 0.01
    decode = g * (100 * 20 + 150 * 10 + 180 * 5)                       # 44.0
    assert pte.pte(TURNS, g) == pytest.approx(100 + 150 + 180 + decode)                 # 474
    assert pte.pte(TURNS, g, cache_reuse=True) == pytest.approx(100 + 30 + 20 + decode)  # 194
    assert trajectory_pte(make_trajectory(TURNS), g) == pytest.approx(474.0)
    assert trajectory_pte(make_trajectory(TURNS), g, cache_reuse=True) == pytest.approx(194.0)
    assert pte.pte_per_turn(TURNS, g) == pytest.approx([120.0, 165.0, 189.0])
    assert pte.turn_cost(TURNS[1], g, cache_reuse=True) == pytest.approx((30.0, 15.0))
    assert trajectory_pte(make_trajectory([]), g) == 0.0                  # no generation happened
    assert pte.pte(TURNS, 0.0) == 430.0                                   # γ = 0: prefill only
    assert pte.PTEConfig(cache_reuse=True).trajectory_pte(make_trajectory(TURNS), g) == pytest.approx(194.0)


def test_pte_of_a_real_agent_loop_trajectory():
    """The field names are the ones the agent loop writes: run it on a scripted backend and recompute."""
    from tests.doubles import CALL, calc_task, run

    (t,), backend = run({"20+20": [CALL % "20+20", "\\boxed{40}"]}, [calc_task(1, "20+20", "40")], mode="force")
    prompts = [len(p.split()) for (p,) in backend.calls]                 # the scripted backend's token count
    decodes = [len(tr.text.split()) for tr in t.turns]
    g = 0.003
    assert trajectory_pte(t, g) == pytest.approx(sum(p + g * p * d for p, d in zip(prompts, decodes)))
    new = [prompts[0]] + [p - (q + d) for p, q, d in zip(prompts[1:], prompts, decodes)]
    assert trajectory_pte(t, g, cache_reuse=True) == pytest.approx(
        sum(n + g * p * d for n, p, d in zip(new, prompts, decodes)))
    assert trajectory_pte(t, g, cache_reuse=True) < trajectory_pte(t, g)


def test_pte_errors_name_the_task_and_the_turn():
    # new_tokens may be missing from an old file: full eviction never reads it, cache-reuse PTE refuses
    old = [dataclasses.replace(t, new_tokens=None) for t in TURNS]
    assert pte.pte(old, 0.01) == pytest.approx(474.0)
    with pytest.raises(TrajectoryError, match=r"task 'w2t/9': field 'turns\[0\]\.new_tokens': not recorded"):
        trajectory_pte(make_trajectory(old, task_id="w2t/9"), 0.01, cache_reuse=True)
    with pytest.raises(ValueError, match="gamma must be a non-negative number"):
        pte.pte(TURNS, float("nan"))
    # token counts themselves are checked once, by the trajectory's validator, when a record is read
    record = make_trajectory(TURNS, task_id="abc").to_dict()
    record["turns"][2]["context_len"] = None
    with pytest.raises(TrajectoryError, match=r"task 'abc': field 'turns\[2\]\.context_len': must be an integer"):
        Trajectory.from_dict(record)


# ------------------------------------------------------------------------------------------- hardware profiles


def test_registry_has_the_paper_profiles_and_dense_ones_with_sources():
    paper = {"h100_pcie_paper": 756.5, "h200_nvl_paper": 348.1, "a100_pcie_paper": 322.5,
             "rtx4090_paper": 327.4, "v100_sxm2_paper": 138.9}          # the paper's Table 2 / Table 4
    for name, hoi in paper.items():
        p = hardware.PROFILES[name]
        assert p.hoi == hoi and round(p.peak_flops / p.mem_bandwidth, 1) == hoi
        assert "2604.05404" in p.source
    dense = [n for n in hardware.PROFILES if n.endswith("_dense")]
    assert {"h100_sxm_dense", "h100_pcie_dense", "h200_sxm_dense", "a100_sxm_dense", "rtx4090_dense",
            "v100_sxm2_dense"} <= set(dense)
    for name, p in hardware.PROFILES.items():
        assert p.name == name and "NVIDIA" in p.source and len(p.source) > 60
        if name.endswith("_dense"):
            assert not p.sparse and p.hoi == pytest.approx(p.peak_flops / p.mem_bandwidth, rel=1e-12)
    assert hardware.DEFAULT_HARDWARE in hardware.PROFILES
    assert {n for n, p in hardware.PROFILES.items() if p.sparse} == {"h100_pcie_paper", "h200_nvl_paper",
                                                                     "a100_pcie_paper"}
    with pytest.raises(ValueError, match="does not match"):
        hardware.HardwareProfile("typo", 1513e12, 2e12, 75.65, "a source")


def test_the_composed_hardware_node_gives_the_papers_gamma():
    """The default ``hardware`` group option, as Hydra composes it, prices the paper's Table 3 exactly."""
    node = recipes.compose("evaluate").hardware
    assert node.name == PAPER and hardware.get_profile(node) == hardware.PROFILES[PAPER]
    assert gamma_from_config(LLAMA_31_8B, node, params="total", paper_rounding=True) == 0.00625
    assert gamma_from_config(QWEN25_7B, node, params="non_embedding", paper_rounding=True) == 0.00329


def test_get_profile_accepts_names_profiles_and_mappings_only():
    p = hardware.PROFILES[PAPER]
    assert hardware.get_profile(PAPER) is p and hardware.get_profile(p) is p
    assert hardware.get_profile(dataclasses.asdict(p)) == p
    with pytest.raises(ValueError, match=r"missing \['source'\]"):
        hardware.get_profile({k: v for k, v in dataclasses.asdict(p).items() if k != "source"})
    with pytest.raises(TypeError, match="not int"):
        hardware.get_profile(3)
