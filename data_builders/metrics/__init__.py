"""Pure functions of trajectories: answer scoring, token cost, PTE with its hardware profiles, inefficiency
patterns. No model and no training code here."""
