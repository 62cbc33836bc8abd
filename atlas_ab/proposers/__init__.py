"""Drafters behind one protocol (base.DraftProposer)."""
