"""A run's files: the directory's layout, atomic writes and the metrics log, records, checkpoints, the control file."""
