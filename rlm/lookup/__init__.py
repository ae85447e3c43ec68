"""Timestamp and offset lookups over the remote and local tiers, served through bounded reader pools."""
