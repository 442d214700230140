"""Tests of core.worker (core/worker/)."""
