"""What every export and import shares: the episodes to export (a dataset or a manifest's), read
one episode and one frame at a time, and an output that appears whole or not at all."""
