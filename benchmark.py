"""Load a running embedgate server and report its speed; see ``--help`` and the README."""

from embedgate.bench.cli import main

if __name__ == "__main__":
    main()
