"""Mirrors of runs where teams already keep theirs: MLflow (as a run trains, or afterwards)."""
