"""Tests of core.runfiles (core/runfiles/)."""
