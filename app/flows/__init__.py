"""The window's flows: a run's lifecycle on screen, continue and fork, past runs, the advisor, export."""
