"""Tests of core.services (core/services/)."""
