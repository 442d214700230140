"""Tests of app.plots (app/plots/)."""
