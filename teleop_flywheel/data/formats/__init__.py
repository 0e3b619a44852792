"""Other training stacks' formats, out of and into our LeRobot v3.0 datasets (docs/formats.md).

`common/` is what every format shares; each format is one module or subpackage beside it.
"""
