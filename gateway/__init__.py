"""Meshgate broker node."""

__version__ = "0.1.0"
