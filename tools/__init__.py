"""Developer tools for rkv's own tree (not shipped in the distribution)."""
