"""What every export and import shares: the episodes to export (a dataset or a manifest's), read
one episode and one frame at a time, written one episode per worker process, into an output that
appears whole or not at all and is recorded in lineage."""
