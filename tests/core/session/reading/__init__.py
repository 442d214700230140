"""Tests of core.session.reading (core/session/reading/)."""
