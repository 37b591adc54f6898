"""recipe=pte_grpo: the reward functions on hand-made episodes, the episode → token sequence used by the
policy gradient, and a tiny-model smoke run of TRL's GRPOTrainer with multi-turn tool rollouts."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
from huggingface_hub import ModelCard
from safetensors.torch import load_file

from recipes import compose
from trainers.policy.rewards import correctness, otc, otc_tool_score, pte_cost, reward_scaling, reward_setup
from trainers.recipe import RunInfo


# ---------------------------------------------------------------------------- rewards
def total_reward(kind: str, lam: float, **fields) -> list[float]:
    """The weighted sum TRL computes from ``reward_setup``'s functions and weights."""
    funcs, weights = reward_setup(kind, lam)
    n = len(fields["correct"])
    parts = [f([None] * n, [None] * n, **fields) for f in funcs]
    return [sum(w * p[i] for w, p in zip(weights, parts)) for i in range(n)]


def episodes(**fields):
    n = len(next(iter(fields.values())))
    return {"prompts": [None] * n, "completions": [None] * n, **fields}


def test_lambda_zero_is_the_plain_correctness_reward():
    f = dict(correct=[True, False, True], pte_normalised=[0.5, 2.0, 3.0], tool_calls=[1, 0, 3],
             task_key=["a", "a", "b"])
    assert total_reward("pte", 0.0, **f) == [1.0, 0.0, 1.0]
    assert total_reward("pte", 0.5, **f) == pytest.approx([1 - 0.25, -1.0, 1 - 1.5])


def test_cheaper_correct_episode_earns_more_and_wrong_never_beats_right_at_equal_cost():
    f = dict(correct=[True, True, False], pte_normalised=[1.0, 0.4, 0.4])
    r = total_reward("pte", 0.5, **f)
    assert r[1] > r[0] > r[2]


def test_reward_functions_have_trls_signature_and_log_components():
    logged = {}
    out = correctness(**episodes(correct=[True, False]), tool_calls=[2, 0], pte=[100.0, 50.0],
                      format_errors=[0, 1], log_metric=lambda k, v: logged.__setitem__(k, v))
    assert out == [1.0, 0.0]
    assert logged == {"rollout/accuracy": 0.5, "rollout/tool_calls": 1.0, "rollout/pte": 75.0,
                      "rollout/format_errors": 0.5}
    assert pte_cost(**episodes(pte_normalised=[0.25, 1.5])) == [-0.25, -1.5]


def test_reward_weights_follow_lambda_and_refuse_bad_settings():
    funcs, weights = reward_setup("pte", 0.3)
    assert [f.__name__ for f in funcs] == ["correctness", "pte_cost"] and weights == [1.0, 0.3]
    with pytest.raises(ValueError, match="unknown reward kind"):
        reward_setup("nope", 0.1)
    with pytest.raises(ValueError, match=">= 0"):
        reward_setup("pte", -1)


# a group per task: (correct, tool calls) of each episode; task "a": two right (1 and 3 calls), two wrong (2 and 0);
# task "b": both wrong
GROUPS = dict(correct=[True, True, False, False, False, False], tool_calls=[1, 3, 2, 0, 2, 1],
              task_key=["a", "a", "a", "a", "b", "b"])


def test_balanced_reward_charges_the_share_of_calls_its_group_showed_unnecessary():
    # n = 1 for "a" (its fewest-call correct episode); "b" has no correct episode: no call is shown unnecessary
    # 3 calls: 2 of 3 unnecessary; a wrong episode with 2 calls: 1 of 2; 0 calls: none
    assert total_reward("balanced", 0.5, **GROUPS) == pytest.approx([1.0, 1 - 0.5 * 2 / 3, -0.5 * 1 / 2, 0.0,
                                                                      0.0, 0.0])
    assert total_reward("balanced", 0.0, **GROUPS) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    # the rollout's n over the whole group (across ranks) wins over what these episodes alone show
    assert total_reward("balanced", 1.0, **GROUPS, otc_best=[0, 0, 0, 0, None, None]) == pytest.approx(
        [0.0, 0.0, -1.0, 0.0, 0.0, 0.0])


def test_hdpo_advantages_are_accuracy_plus_efficiency_among_the_correct_only():
    got = total_reward("hdpo", 0.5, **GROUPS)
    # accuracy: "a" is [1, 1, 0, 0] -> mean 0.5, std 0.5 -> +-1; "b" all wrong -> 0.
    # efficiency among "a"'s correct episodes: -calls = [-1, -3] -> mean -2, std 1 -> [+1, -1]; wrong ones: 0
    assert got == pytest.approx([1 + 0.5 * 1, 1 - 0.5 * 1, -1.0, -1.0, 0.0, 0.0], abs=1e-5)
    # each group's advantages already have mean 0: TRL's group mean subtracts nothing, and the kind turns off
    # TRL's std scaling, which would mix the two advantages again
    for k in "ab":
        assert sum(v for v, t in zip(got, GROUPS["task_key"]) if t == k) == pytest.approx(0.0, abs=1e-9)
    assert reward_scaling("hdpo", "group") == "none" and reward_scaling("pte", "group") == "group"
    # a cheaper wrong episode gains nothing for its thrift; the dearer correct one still beats every wrong one
    assert got[3] == got[2] and got[1] > got[2]


def test_hdpo_runs_are_ranked_by_accuracy_since_their_mean_reward_is_zero():
    from trainers.policy.grpo import objective

    log = [{"reward": 0.0}] * 8                                  # what TRL logs for hdpo, whatever the policy does
    rollouts = [{"accuracy": a} for a in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.9, 0.7)]
    assert objective("hdpo", log, rollouts) == ("accuracy", pytest.approx(0.8))     # the last quarter: 0.9, 0.7
    assert objective("pte", [{"reward": r} for r in (0.0, 1.0, 0.2, 0.4)], rollouts) == ("reward", 0.4)


def test_otc_tool_score_matches_the_paper_shape():
    assert otc_tool_score(0, 0) == 1.0                       # solvable without tools, no call
    assert otc_tool_score(1, 0) == pytest.approx(math.cos(math.pi / 3))
    assert otc_tool_score(2, 2) == pytest.approx(1.0)        # the optimal count scores 1
    assert otc_tool_score(1, 2) < 1 and otc_tool_score(4, 2) < 1 and otc_tool_score(4, 2) > otc_tool_score(8, 2)
    assert otc_tool_score(3, None) == pytest.approx(math.cos(3 * math.pi / 7))
    with pytest.raises(ValueError):
        otc_tool_score(-1, 0)


def test_otc_estimates_the_optimal_count_per_task_from_correct_episodes():
    f = episodes(correct=[True, True, False, True], tool_calls=[2, 1, 0, 3], task_key=["a", "a", "a", "b"])
    r = otc(**f, otc_c=1.0)
    # task a: n = 1 (the cheapest correct episode); the wrong one gets 0 whatever its calls
    assert r[1] == pytest.approx(1.0) and r[0] == pytest.approx(math.sin((2 * 2 / 3) * math.pi / 2))
    assert r[2] == 0.0 and r[3] == pytest.approx(1.0)          # task b: n = m = 3


# ---------------------------------------------------------------------------- episode -> tokens
def test_episode_tokens_train_only_on_what_the_model_wrote(tiny_backend):
    from data_builders.agent.loop import Agent, AgentConfig
    from data_builders.agent.trajectory import Turn
    from data_builders.tasks import load_tasks
    from trainers.policy.grpo import episode_tokens

    task = load_tasks("builtin", split="train", n_per_cell=1, envs=["CalculatorEnv"], difficulties=["easy"])[0]
    agent = Agent(tiny_backend, AgentConfig(max_rounds=2, max_new_tokens=8, keep_token_ids=True))
    tok = tiny_backend.tokenizer
    # A hand-made two-turn episode: a tool call, the tool result, then an answer ending in EOS.
    call = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "1+1"}}\n</tool_call>'
    answer = "\\boxed{2}"
    first = agent.initial_prompt(task)
    msgs = agent._start(task, -1).messages + [{"role": "assistant", "content": call},
                                               {"role": "user", "content": "<tool_response>\n{\"result\": 2}\n</tool_response>"},
                                               {"role": "assistant", "content": answer}]
    ids_call = tok(call, add_special_tokens=False).input_ids
    ids_ans = tok(answer, add_special_tokens=False).input_ids + [tok.eos_token_id]
    # a real typed trajectory of the task, its messages and turns replaced by the hand-made ones
    traj = dataclasses.replace(agent.run([task])[0], messages=msgs, turns=[
        Turn(round=0, text=call, prefill_tokens=0, context_len=0, decode_tokens=len(ids_call), token_ids=ids_call,
             raw_logprobs=[-0.5] * len(ids_call), finish_reason="stop"),
        Turn(round=1, text=answer, prefill_tokens=0, context_len=0, decode_tokens=len(ids_ans), token_ids=ids_ans,
             raw_logprobs=[-0.25] * len(ids_ans), finish_reason="eos")])
    seq = episode_tokens(traj, tok, agent.renderer(task))
    assert tok.decode(seq.prompt_ids) == first
    model_text = tok.decode([t for t, m in zip(seq.completion_ids, seq.env_mask) if m])
    env_text = tok.decode([t for t, m in zip(seq.completion_ids, seq.env_mask) if not m])
    assert model_text == call + answer + tok.eos_token
    assert "<tool_response>" in env_text and "calculate" not in env_text
    # prompt + completion is exactly the last prompt the model saw, plus its final turn
    full = tok.decode(seq.prompt_ids + seq.completion_ids)
    last_prompt = agent.renderer(task)(msgs[:-1])
    assert full == last_prompt + answer + tok.eos_token
    assert seq.logprobs == [-0.5] * len(ids_call) + [0.0] * (len(seq.env_mask) - sum(seq.env_mask)) + \
        [-0.25] * len(ids_ans)
    assert len(seq.completion_ids) == len(seq.env_mask) == len(seq.logprobs)


def test_episode_tokens_refuses_a_trajectory_without_token_ids(tiny_backend):
    from data_builders.agent.loop import Agent, AgentConfig
    from data_builders.tasks import load_tasks
    from trainers.policy.grpo import EpisodeTokenError, episode_tokens

    task = load_tasks("builtin", split="train", n_per_cell=1, envs=["CalculatorEnv"], difficulties=["easy"])[0]
    agent = Agent(tiny_backend, AgentConfig(max_rounds=1, max_new_tokens=4))
    traj = agent.run([task])[0]
    with pytest.raises(EpisodeTokenError, match="keep_token_ids"):
        episode_tokens(traj, tiny_backend.tokenizer, agent.renderer(task))


# ---------------------------------------------------------------------------- start policy and smoke run
def composed(tmp_path, model_dir, *overrides):
    """The fit config as ``python -m trainers.fit recipe=pte_grpo model=hf model.name=<dir> ...`` composes it
    (small data and rollouts), and the run state trainers.fit would pass."""
    cfg = compose("fit", [
        "recipe=pte_grpo", "model=hf", f"model.name={model_dir}", "logger=none",
        f"recipe.output_dir={tmp_path / 'adapter'}",
        "tasks.n_per_cell=1", "tasks.envs=[CalculatorEnv,HashEnv]",
        "recipe.rollout.max_new_tokens=12", "recipe.rollout.max_rounds=2",
        "recipe.generation.prompts_per_step=2", "recipe.generation.num_generations=3",
        "recipe.train.micro_batch=3", "recipe.train.learning_rate=0.01", *overrides])
    return cfg, RunInfo(dir=tmp_path / "run", command="pytest")


@pytest.fixture
def start_adapter(tiny_model_dir, tmp_path):
    """A LoRA on the tiny Llama unlike the recipe's fresh one: r=4 on q/v only, random nonzero B."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    model.save_pretrained(tmp_path / "start")
    return tmp_path / "start"


def test_the_start_policy_is_the_model_groups_adapter_loaded_trainable(tiny_model_dir, tmp_path, start_adapter):
    import torch
    from peft import get_peft_model_state_dict

    from trainers.policy.common import load_policy

    cfg, _ = composed(tmp_path, tiny_model_dir, f"model.adapter={start_adapter}")
    policy = load_policy(cfg.model, cfg.recipe.lora)
    assert policy.start_adapter == str(start_adapter) and policy.model.peft_config["default"].r == 4
    saved, loaded = load_file(str(start_adapter / "adapter_model.safetensors")), get_peft_model_state_dict(policy.model)
    assert saved.keys() == loaded.keys() and all(torch.equal(saved[k], loaded[k]) for k in saved)
    lora = [p for n, p in policy.model.named_parameters() if "lora_" in n]
    assert len(lora) == len(saved) and all(p.requires_grad for p in lora)
    assert policy.model.peft_config["default"].base_model_name_or_path == str(tiny_model_dir)


def test_without_an_adapter_the_start_policy_is_a_fresh_lora_from_the_recipe(tiny_model_dir, tmp_path):
    from trainers.policy.common import load_policy

    # one target module: TRL's ModelConfig would turn the list into a regex that matches no module
    cfg, _ = composed(tmp_path, tiny_model_dir, "recipe.lora.target_modules=[q_proj]")
    policy = load_policy(cfg.model, cfg.recipe.lora)
    lora_cfg = policy.model.peft_config["default"]
    assert policy.start_adapter is None and lora_cfg.r == cfg.recipe.lora.r and lora_cfg.target_modules == {"q_proj"}
    lora = {n: p for n, p in policy.model.named_parameters() if "lora_" in n}
    assert len(lora) == 2 * 2 and all(p.requires_grad for p in lora.values())   # A and B in each of 2 layers
    assert all(p.abs().sum() == 0 for n, p in lora.items() if "lora_B" in n)     # LoRA starts as the base
    assert lora_cfg.base_model_name_or_path == str(tiny_model_dir)


@pytest.mark.slow
def test_grpo_smoke_run_trains_the_start_adapter_and_varies_rewards_within_groups(tiny_model_dir, tmp_path,
                                                                                 start_adapter):
    import torch

    from trainers.policy.grpo import fit

    cfg, run = composed(tmp_path, tiny_model_dir, f"model.adapter={start_adapter}", "recipe.train.max_steps=2")
    fitted = fit(cfg.recipe, cfg, run)
    out = fitted.export_dir
    m = json.loads((out / "metrics.json").read_text())
    assert m["train_steps"] == 2 and len(m["rollouts"]) == 2
    assert m["lora_tensors_changed"] > 0
    steps = [h for h in m["log_history"] if "reward_std" in h]
    assert len(steps) == 2
    # PTE differs between a group's episodes (different lengths and rounds), so advantages are not all zero
    assert min(h["frac_reward_zero_std"] for h in steps) < 1.0
    assert all("rewards/pte_cost/mean" in h and "rollout/tool_calls" in h and "rollout/pte" in h for h in steps)
    assert fitted.objective_name == "reward" and fitted.objective == pytest.approx(steps[-1]["reward"])
    # the export continues the start adapter (r=4, q/v) on the model group's base, with changed weights
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["base_model_name_or_path"] == str(tiny_model_dir)
    start = load_file(str(start_adapter / "adapter_model.safetensors"))
    tuned = load_file(str(out / "adapter_model.safetensors"))
    assert start.keys() == tuned.keys() and any(not torch.equal(start[k], tuned[k]) for k in start)
    card = ModelCard.load(out / "README.md")
    assert card.data.base_model == str(tiny_model_dir) and "grpo" in card.data.tags
    assert "Reproduce: `pytest`" in card.text and "λ = 0.5" in card.text and str(start_adapter) in card.text


def test_the_recipe_is_registered_and_composes_with_otc():
    from trainers.fit import resolve
    from trainers.policy import grpo

    assert resolve("pte_grpo") is grpo.fit          # what python -m trainers.fit recipe=pte_grpo runs
    cfg = compose("fit", ["recipe=pte_grpo", "recipe.reward.kind=otc", "recipe.reward.lam=0"])
    funcs, weights = reward_setup(cfg.recipe.reward.kind, cfg.recipe.reward.lam)
    assert [f.__name__ for f in funcs] == ["otc", "pte_cost"] and weights == [1.0, 0.0]
    # the default start policy: the model group's committed tool_sft adapter
    assert cfg.hardware.name and cfg.model.adapter.startswith("checkpoints/tool_sft/")
