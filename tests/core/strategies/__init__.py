"""Tests of core.strategies (core/strategies/)."""
