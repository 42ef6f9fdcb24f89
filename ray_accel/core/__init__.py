"""The bottom layer: devices, visibility masks, samples, /proc, validators (pure, no Ray)."""
