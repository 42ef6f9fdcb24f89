"""Ray's accelerator registry, with our managers put in (private Ray API, version-gated)."""
