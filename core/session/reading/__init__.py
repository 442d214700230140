"""What a run's records say, reduced (pure: no processes, no files, no torch): its stats and its timeline."""
