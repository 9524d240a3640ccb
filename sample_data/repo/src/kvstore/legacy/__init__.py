"""Code kept for clients that still speak the v0.3 protocol."""
