"""Run telemetry: the steps and events tables of docs/telemetry.md.

Kept import-free on purpose: the analysis reads telemetry without torch, and
`atlas_ab.telemetry.fingerprint` imports torch (and Triton only on first use).
"""
