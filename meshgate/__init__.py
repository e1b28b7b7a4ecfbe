"""Meshgate's composition layer: the node assembled from its parts, the command line and the local mesh."""
