"""Tests of app.views (app/views/)."""
