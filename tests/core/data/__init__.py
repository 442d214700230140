"""Tests of core.data (core/data/)."""
