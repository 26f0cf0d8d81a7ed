"""``python -m gym_remote`` runs the ``gym-remote`` command line."""

from gym_remote.cli import main

raise SystemExit(main())
