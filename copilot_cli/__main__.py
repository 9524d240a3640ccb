"""`python -m copilot_cli` runs the same CLI as the `copilot-opt` console script."""

from copilot_cli.cli import main

if __name__ == "__main__":
    main()
