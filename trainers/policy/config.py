"""The policy recipes' schemas (``recipe=tool_sft``, ``recipe=pte_grpo``): what trainers.policy reads."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Optional

from omegaconf import DictConfig

from data_builders.agent.config import AgentLoopConfig
from data_builders.agent.prompts import CALL_FORMATS, PROMPT_MODES
from data_builders.config_fields import param, positive_or_auto, required
from data_builders.metrics.pte import PARAM_CONVENTIONS
from data_builders.tasks.schema import DIFFICULTIES
from recipes.schema import store
from trainers.config import overridden, Recipe
from trainers.controller.config import Points

# vocabularies the training code owns, by name: read when a config is checked (recipes.schema.vocabulary), so this
# module stays light for the entry points that compose a recipe without running it
REWARD_KINDS = "trainers.policy.rewards:REWARDS"
SCHEDULERS = "transformers.trainer_utils:SchedulerType"      # TRL's lr_scheduler_type


@dataclass
class LoraConfig:
    """A fresh LoRA (peft, through TRL's ModelConfig), for a model without an adapter."""
    r: int = param(16, "rank", ge=1)
    alpha: int = param(32, "scale numerator (alpha / r scales the update)", ge=1)
    dropout: float = param(0.05, "dropout on the LoRA input", ge=0, lt=1)
    target_modules: Any = param("all-linear", "all-linear or a list of module names: peft takes either")


@dataclass
class SFTDirectRule:
    """One rule of direct ``\\boxed{gold}`` answers (data_builders.oracle.sft.DirectRule): which tasks also get
    one, in which prompt modes."""
    modes: List[str] = required("prompt modes the direct answer is rendered in", items=PROMPT_MODES)
    difficulties: List[str] = required("task difficulties the rule covers", items=DIFFICULTIES)
    fraction: float = required("share of those tasks that get a direct answer (a seeded draw)", ge=0, le=1)
    multi_step: bool = param(False, "true: multi-hop tasks too")
    categories: Optional[List[str]] = param(None, "A B C M; null = every category", items=("A", "B", "C", "M"))


# Policy recipes: TRL trains the policy of the ``model`` group on train tasks of the ``tasks`` group.
POLICY_UNUSED = {
    "backend": "TRL trains and generates with the model itself (pte_grpo: recipe.generation.use_vllm for vLLM)",
    "trainer": "that group places Lightning fits; TRL runs in each process accelerate launch starts",
    "source": "a policy recipe trains on the tasks group (source=capture feeds the controller recipes)",
    "capture": "a policy recipe trains on the tasks group (source=capture feeds the controller recipes)",
}


class PolicyRecipe(Recipe):
    @classmethod
    def refusals(cls, cfg: DictConfig, keys: list[str]) -> list[str]:
        out = super().refusals(cfg, keys)
        if cfg.model.adapter:   # a start adapter is trained as it is, whatever recipe.lora says
            out += [f"{key} (model.adapter={cfg.model.adapter} is trained further; recipe.lora shapes a fresh "
                    f"LoRA only, for a model without an adapter)" for key in overridden(keys, "recipe.lora")]
        if cfg.logger.name == "csv":
            out.append(f"logger=csv (recipe={cfg.recipe.name} reports through TRL, to W&B or nowhere: logger=wandb "
                       f"or logger=none)")
        return out


@dataclass
class SFTData:
    """How tool_sft turns its train tasks (the ``tasks`` group) into demonstrations."""
    tool_modes: List[str] = param(["default", "force"], "a tool demonstration is rendered in one of these (seeded "
                                                        "draw)", items=PROMPT_MODES)
    direct: List[SFTDirectRule] = param([
        # mode following: told not to use tools, it answers
        SFTDirectRule(modes=["no_tool", "hard_no_tool"], difficulties=["easy", "medium", "hard"], fraction=0.4,
                      multi_step=True),
        # answer what a small model can learn to answer (its call demonstration then comes in force mode)
        SFTDirectRule(modes=["default"], difficulties=["easy"], fraction=0.5),
    ], "direct \\boxed{gold} answers, never a call")
    call_format: str = param("xml", "the tool-call format demonstrated", choices=CALL_FORMATS)
    val_fraction: float = param(0.1, "held-out tasks (not rows) for the validation loss", ge=0, lt=1)
    max_length: int = param(2048, "tokens; longer conversations are dropped, never truncated (every environment "
                                  "fits but hard 2-D lists, 4-5k)", ge=1)
    seed: int = param(0, "mode draws, direct-answer draws and the validation split")


@dataclass
class SFTTrain:
    """TRL ``SFTConfig`` fields, by TRL's names (``batch_size`` is its per-device train and eval batch size)."""
    num_train_epochs: float = param(1.0, "passes over the data (max_steps > 0 caps them)", gt=0)
    max_steps: int = param(60, "optimizer steps (caps CPU time: 60 x 8 conversations, ~0.9 epoch); -1 = "
                               "num_train_epochs decides", ge=-1)
    learning_rate: float = param(1.0e-3, "peak learning rate", gt=0)
    lr_scheduler_type: str = param("cosine", "transformers' scheduler", choices=SCHEDULERS)
    warmup_steps: float = param(0.05, "an integer: warmup steps; a float in [0, 1): a ratio of the total steps",
                                ge=0)
    batch_size: int = param(1, "conversations per step and process (one: no padding work on CPU)", ge=1)
    gradient_accumulation_steps: int = param(8, "steps accumulated per optimizer step", ge=1)
    logging_steps: int = param(5, "steps between logged losses", ge=1)
    eval_steps: int = param(100, "steps between validation passes; > max_steps: one, at the end (each costs "
                                 "~1.5 min on CPU)", ge=1)
    gradient_checkpointing: bool = param(False, "recompute activations in backward: less memory, ~1/3 more CPU "
                                                "time (TRL turns it on by default; a 135M model fits without)")
    bf16: bool = param(True, "bf16 autocast of the update (weights stay in model.dtype): TRL's default, on the CPU "
                             "too")
    fp16: bool = param(False, "fp16 autocast of the update")
    seed: int = param(0, "torch and TRL seed")


@dataclass
class ToolSFTRecipe(PolicyRecipe):
    UNUSED: ClassVar[Dict[str, str]] = {**POLICY_UNUSED, "hardware": "only pte_grpo prices episodes in PTE",
                                        "model.max_batch_size": "TRL batches by recipe.train.batch_size",
                                        "model.max_batch_tokens": "TRL batches by recipe.train.batch_size"}
    name: str = param("tool_sft", "the recipe (trainers.fit.RECIPES)")
    output_dir: str = param("checkpoints/tool_sft/${now:%Y-%m-%d_%H-%M-%S}", "where the adapter is exported")
    data: SFTData = param(SFTData(), "demonstrations")
    lora: LoraConfig = param(LoraConfig(), "the fresh LoRA (a model with an adapter trains that one instead)")
    train: SFTTrain = param(SFTTrain(), "TRL SFTConfig")


@dataclass
class GRPOData:
    """The prompts of pte_grpo's train tasks (the ``tasks`` group)."""
    seed: int = param(0, "the shuffle of the prompt dataset")


@dataclass
class GRPOGeneration:
    """TRL ``GRPOConfig`` generation fields, by TRL's names (``prompts_per_step`` sets its batch sizes)."""
    prompts_per_step: int = param(3, "tasks per step, all processes together (3 x 4 = 12 episodes: ~2.7 min a step "
                                     "on 2 CPU cores); under accelerate launch each process rolls out its share",
                                  ge=1)
    num_generations: int = param(4, "episodes per task (the GRPO group)", ge=2)
    temperature: float = param(1.0, "1.0: the engines' log-probs are the sampling distribution's", gt=0)
    top_p: float = param(1.0, "nucleus sampling", gt=0, le=1)
    max_completion_length: int = param(1024, "tokens of an episode after its first prompt", ge=1)
    use_vllm: bool = param(False, "true: TRL's vLLM generates (pip install .[vllm]); false: HF generate")
    vllm_mode: str = param("colocate", "colocate: an engine in each training process | server: `trl vllm-serve`",
                           choices=("colocate", "server"))
    vllm_server_base_url: Optional[str] = param(None, "server mode: e.g. http://10.0.0.5:8000 (wins over "
                                                      "host/port)")
    vllm_server_host: str = param("0.0.0.0", "server mode: where `trl vllm-serve` listens (its --host)")
    vllm_server_port: int = param(8000, "server mode: its --port", ge=1, le=65535)


@dataclass
class GRPOReward:
    """reward = correctness − λ·PTE/normaliser (pte), correctness × r_tool − λ·PTE/normaliser (otc),
    correctness − λ·unnecessary-call share (balanced), or HDPO's accuracy + λ·efficiency advantages (hdpo)."""
    kind: str = param("pte", "pte | otc | balanced | hdpo (trainers/policy/rewards.py)", choices=REWARD_KINDS)
    lam: float = param(0.5, "λ; 0 = plain correctness reward", ge=0)
    normaliser: Any = param("auto", "auto = the start policy's mean PTE on the first batch; or a number (OmegaConf "
                                    "has no str | float)", check=positive_or_auto)
    otc_c: float = param(1.0, "OTC's smoothing constant c", gt=0)
    cache_reuse: bool = param(False, "PTE with full KV eviction after each tool call (arXiv 2604.05404)")
    pte_params: str = param("non_embedding", "the parameter count behind PTE's γ", choices=PARAM_CONVENTIONS)


@dataclass
class GRPOTrain:
    """TRL ``GRPOConfig`` training fields, by TRL's names (``micro_batch`` and ``trainable_layers`` are toolwise's)."""
    max_steps: int = param(15, "optimizer steps (the model card has the measured wall time: <= 45 min on 2 CPU "
                               "cores)", ge=1)
    micro_batch: int = param(3, "episodes per forward/backward (peak memory); a step accumulates the rollout batch",
                             ge=1)
    trainable_layers: Optional[int] = param(8, "LoRA of the top 8 of 30 layers is trained (null = all): backward "
                                               "stops there", ge=1)
    learning_rate: float = param(1.0e-4, "few steps on a CPU budget: a LoRA-scale learning rate", gt=0)
    bf16: bool = param(True, "bf16 autocast for the policy update (1.6x faster fwd+bwd on AMX CPUs, measured)")
    fp16: bool = param(False, "fp16 autocast of the update")
    gradient_checkpointing: bool = param(False, "recomputes activations in backward: less memory, ~1/3 more "
                                                "compute")
    lr_scheduler_type: str = param("constant", "transformers' scheduler", choices=SCHEDULERS)
    warmup_steps: float = param(0.0, "an integer: warmup steps; a float in [0, 1): a ratio of the total steps",
                                ge=0)
    beta: float = param(0.0, "KL weight; 0: no KL term (with a peft model TRL's reference would be the bare base "
                             "model)", ge=0)
    loss_type: str = param("dapo", "TRL's loss aggregation")
    scale_rewards: str = param("group", "TRL's reward scaling: group | batch | none")
    seed: int = param(0, "torch and TRL seed")


@dataclass
class PTEGRPORecipe(PolicyRecipe):
    UNUSED: ClassVar[Dict[str, str]] = POLICY_UNUSED
    name: str = param("pte_grpo", "the recipe (trainers.fit.RECIPES)")
    output_dir: str = param("checkpoints/pte_grpo/${now:%Y-%m-%d_%H-%M-%S}", "where the adapter is exported")
    data: GRPOData = param(GRPOData(), "the prompt dataset")
    rollout: AgentLoopConfig = param(AgentLoopConfig(max_rounds=3, max_new_tokens=128),   # type: ignore[valid-type]
                                     "the agent loop of every training episode (data_builders/agent/loop.py); "
                                     "its mode is the deployed one: the policy decides whether to call")
    generation: GRPOGeneration = param(GRPOGeneration(), "sampling")
    reward: GRPOReward = param(GRPOReward(), "the reward")
    lora: LoraConfig = param(LoraConfig(), "a fresh LoRA, only for a model without an adapter (model=smollm2_base)")
    train: GRPOTrain = param(GRPOTrain(), "TRL GRPOConfig")


@dataclass
class DPOPairs:
    """How tool_dpo turns the policy's probe points into preference pairs (data_builders/points/preferences.py)."""
    first_turn_tokens: int = param(128, "the policy's own first turn (default mode, greedy) is read with this many "
                                        "new tokens: a call it writes there is the call side of its pairs", ge=1)
    oracle_calls: bool = param(True, "where the policy wrote no call, the oracle's first call of the task is the "
                                     "call side (false: such pairs are left out)")
    categories: List[str] = param(["answer_known", "tool_needed", "harmful_call", "helpful_call"],
                                  "the pair categories trained on (data_builders/points/preferences.py): e.g. "
                                  "[answer_known] only where the policy already calls on nearly every task",
                                  items=("answer_known", "tool_needed", "harmful_call", "helpful_call"))
    flip_dir: Optional[str] = param(None, "a flip decision-point dataset of the same policy (python -m "
                                          "data_builders.build kind=flip): its harmful calls add pairs preferring "
                                          "the answer at that moment, its helpful calls of right episodes pairs "
                                          "preferring the call (train and val splits)")
    balance: bool = param(False, "as many answer-preferred pairs as call-preferred ones per split (the larger side "
                                 "subsampled, seeded by train.seed), after categories")


@dataclass
class DPOTrain:
    """TRL ``DPOConfig`` fields, by TRL's names (``batch_size`` is its per-device train and eval batch size)."""
    max_steps: int = param(30, "optimizer steps", ge=1)
    learning_rate: float = param(5.0e-5, "peak learning rate (the start adapter is trained further)", gt=0)
    lr_scheduler_type: str = param("constant", "transformers' scheduler", choices=SCHEDULERS)
    warmup_steps: float = param(0.0, "an integer: warmup steps; a float in [0, 1): a ratio of the total steps", ge=0)
    beta: float = param(0.1, "DPO's beta: how far the policy may move from the reference (the start policy)", gt=0)
    loss_type: str = param("sigmoid", "TRL's DPO loss (sigmoid: the DPO paper's)")
    sft_weight: float = param(0.0, "weight of an NLL term on the preferred side added to the DPO loss (TRL's `sft` "
                                   "loss combined with loss_type; the RPO objective, arXiv 2404.19733): DPO alone "
                                   "can lower both sides' likelihood, this keeps the preferred answer or call "
                                   "likely (0: DPO alone)", ge=0)
    batch_size: int = param(2, "pairs per step and process (each pair is two sequences of ~700 tokens on the "
                                "mix, their logits ~1 GB in float32)", ge=1)
    gradient_accumulation_steps: int = param(4, "steps accumulated per optimizer step (8 pairs per update)", ge=1)
    trainable_layers: Optional[int] = param(8, "LoRA of the top 8 of 30 layers is trained (null = all): backward "
                                               "stops there, half a step's compute on CPU (as pte_grpo's)", ge=1)
    precompute_ref_log_probs: bool = param(True, "the reference's log-probs of every pair computed once before "
                                                 "training (the reference is fixed: the start adapter's copy), not "
                                                 "again at every step")
    max_length: int = param(2048, "prompt + answer tokens kept (longer pairs are truncated from the left)", ge=16)
    logging_steps: int = param(5, "steps between logged losses", ge=1)
    bf16: bool = param(True, "bf16 autocast of the update (weights stay in model.dtype)")
    fp16: bool = param(False, "fp16 autocast of the update")
    gradient_checkpointing: bool = param(False, "recompute activations in backward: less memory, more compute")
    seed: int = param(0, "torch and TRL seed")


@dataclass
class ToolDPORecipe(PolicyRecipe):
    UNUSED: ClassVar[Dict[str, str]] = {**{k: v for k, v in POLICY_UNUSED.items() if k != "backend"},
                                        "hardware": "only pte_grpo prices episodes in PTE"}
    name: str = param("tool_dpo", "the recipe (trainers.fit.RECIPES)")
    output_dir: str = param("checkpoints/tool_dpo/${now:%Y-%m-%d_%H-%M-%S}", "where the adapter is exported")
    points: Points = param(Points(), "the probe decision points of the policy (built with the backend group, or "
                                     "points.dir); their train and val splits give the pairs")
    pairs: DPOPairs = param(DPOPairs(), "the preference pairs")
    lora: LoraConfig = param(LoraConfig(), "a fresh LoRA, only for a model without an adapter")
    train: DPOTrain = param(DPOTrain(), "TRL DPOConfig")


# what this module adds to Hydra's ConfigStore, (group or None for an entry config, name, schema)
SCHEMAS = [
    ("recipe", "tool_sft_schema", ToolSFTRecipe),
    ("recipe", "pte_grpo_schema", PTEGRPORecipe),
    ("recipe", "tool_dpo_schema", ToolDPORecipe),
]
store(SCHEMAS)
