"""Backends: the plugin interface, their discovery through entry points, the worker runtime model."""
