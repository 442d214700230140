"""A worker's side of a run: its process, its training loop, its channels to the session."""
