"""Tests of app.panel (app/panel/)."""
