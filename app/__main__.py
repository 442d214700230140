"""``python -m app`` launches the GUI."""

from app.main import main

raise SystemExit(main())
