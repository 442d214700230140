"""Tests of core.config (core/config/)."""
