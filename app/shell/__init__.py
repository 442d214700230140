"""The window's shell: the main window, its actions, toolbar, theme, icons, settings and helpers."""
