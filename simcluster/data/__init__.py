"""simcluster."""
