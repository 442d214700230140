"""Tests of app.flows (app/flows/)."""
