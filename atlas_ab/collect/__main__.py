"""`python -m atlas_ab.collect`: the collector's command line (cli.py)."""
import sys

from atlas_ab.collect.cli import main

sys.exit(main())
