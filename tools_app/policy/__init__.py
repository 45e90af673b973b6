"""The approval policy (T12): risk per call and the agent's approval modes."""
