"""Journeys through the window, with the window tests' setup (tests/app/conftest.py)."""
