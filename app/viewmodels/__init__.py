"""What the views read, without Qt: a run's curves, the runs index, progress, the window's state (testable with plain data)."""
