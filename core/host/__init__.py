"""The machine and its processes: devices, cores, lifelines, exit codes, progress bars."""
