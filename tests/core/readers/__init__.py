"""Tests of core.readers (core/readers/)."""
