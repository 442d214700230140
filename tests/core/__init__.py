"""Tests of core, one folder per package of core."""
