"""The ``mapp`` command line: parses arguments, calls one library function, renders the result."""
