"""``python -m mapp`` runs the command line."""

from mapp.cli.main import main

main()
