"""The configuration panel: every config key as a widget, in groups, and back."""
