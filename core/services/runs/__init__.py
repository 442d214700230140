"""Runs, the one door the faces (the command line and the window) take into the engine's runs.

- :mod:`~core.services.runs.start`: a run, each way a face asks for one: ``new_run``, ``continue_run``,
  ``fork_run``, ``attach_run`` (another process's live run) and ``join_torchrun`` (a rank of a torchrun group);
  each returns a ``RunHandle`` (``core.session.handle``) that ``start()`` runs.
- :mod:`~core.services.runs.past`: a past run read whole (``read_past_run``: records, summary, config, shape).
- :mod:`~core.services.runs.files`: a run's folder: its files (``RunDir``), the runs of a folder, the record
  kinds, the log as it grows, the user's notes, the trash, whether it is live.
- :mod:`~core.services.runs.reading`: what a face makes of records: statistics, timeline, counts, the figure.
- :mod:`~core.services.runs.shape`: a run's ``RunShape`` (workers, models, labels, task, figure) and the
  strategies' facts a settings panel shows.
- :mod:`~core.services.runs.control`: steering another process's run (pause, resume, stop).
- :mod:`~core.services.runs.imported`: other tools' TensorBoard logs as read-only runs (``import_tensorboard``).
"""
