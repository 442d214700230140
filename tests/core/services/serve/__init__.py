"""Tests of core.services.serve (core/services/serve/)."""
