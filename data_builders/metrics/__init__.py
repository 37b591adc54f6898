"""Pure functions of trajectories: PTE with its hardware profiles, inefficiency patterns (answer scoring and
When2Tool's token cost are the task's: ``data_builders.tasks.scoring``). No model and no training code here."""
