"""Tests of app (the window), one folder per package of app."""
