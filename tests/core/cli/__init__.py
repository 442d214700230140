"""Tests of core.cli (core/cli/)."""
