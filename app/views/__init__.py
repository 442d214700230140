"""The window's tabs and dialogs beside the live plots: runs, compare, evaluate, search, predict, serve, the learning-rate finder."""
