"""The ``agent`` group's schema: the agent loop's own settings (``AgentConfig``), less what each arm chooses."""
from __future__ import annotations

from data_builders.agent.loop import AgentConfig
from data_builders.config_fields import derived
from recipes.schema import store


# ``agent``: the agent loop's settings less the two each run or arm chooses itself (prompt mode, Reason-then-Act).
AgentSettings = derived(AgentConfig, "AgentSettings", exclude=("mode", "reasoning"), module=__name__)

# An agent loop with every setting (pte_grpo's training rollouts choose their prompt mode too).
AgentLoopConfig = derived(AgentConfig, "AgentLoopConfig", module=__name__)


# what this module adds to Hydra's ConfigStore, (group or None for an entry config, name, schema)
SCHEMAS = [
    ("agent", "schema", AgentSettings),
]
store(SCHEMAS)
