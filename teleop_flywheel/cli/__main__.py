"""`python -m teleop_flywheel.cli`: the same command as the `teleop-flywheel` console script."""
import sys

from teleop_flywheel.cli import main

sys.exit(main())
