"""Journeys: what a user does from start to end, across packages and faces."""
