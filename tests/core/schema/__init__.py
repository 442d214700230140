"""Tests of core.schema (core/schema/)."""
