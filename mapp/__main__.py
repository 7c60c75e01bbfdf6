"""``python -m mapp`` runs the command line."""

from mapp.cli.app import main

main()
