"""Tests of core.host (core/host/)."""
