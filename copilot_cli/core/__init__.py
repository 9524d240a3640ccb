"""Shared core: errors, atomic artifact writing, model loading and fingerprints, progress."""
