"""Tests of core.training (core/training/)."""
