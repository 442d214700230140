"""The live plots (pyqtgraph): their widgets, axes, pacing and text."""
