"""Tests of core.launchers (core/launchers/)."""
