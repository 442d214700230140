"""A live run's machinery: the collector thread, the processes and their health, consistent checkpoints, recording, the end."""
