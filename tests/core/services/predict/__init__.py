"""Tests of core.services.predict (core/services/predict/)."""
