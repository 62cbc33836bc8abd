"""Shared test helpers: tiny models, engine fixtures, an independent MTP reference, the fake runner."""
