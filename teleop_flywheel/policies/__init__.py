"""Policies the `policy` node can run: built-ins and plugins (see `policies.base.load_policy`)."""
