"""Tests of app.viewmodels (app/viewmodels/)."""
