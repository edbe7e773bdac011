"""Ready-to-use agents: a tool-using math agent, a single-turn baseline, a black-box CLI agent."""
