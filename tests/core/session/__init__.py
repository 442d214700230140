"""Tests of core.session (core/session/)."""
