"""Helpers shared by the tests: processes, terminals, a Foxglove client, repository paths."""
