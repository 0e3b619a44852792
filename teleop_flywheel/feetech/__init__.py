"""feetech."""
