"""The Runs tab: every run of the runs directory in a sortable, filterable table (app.views.runs.view), its
columns, model and in-place editing (app.views.runs.table)."""

from app.views.runs.table import COL, COLUMNS
from app.views.runs.view import RunsView

__all__ = ["COL", "COLUMNS", "RunsView"]
