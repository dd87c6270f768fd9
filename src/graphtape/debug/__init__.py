"""Time travel and logic injection: history, diffs, forks, overrides, breakpoints."""
