"""Races: clones of a run's state, each with changed settings, trained side by side; the worse half stops at
each rung and the winner goes on (:mod:`~core.services.race.plan`, :mod:`~core.services.race.race`)."""
