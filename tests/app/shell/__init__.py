"""Tests of app.shell (app/shell/)."""
