"""atlas_ab as the A/B client of a running engine (`python -m atlas_ab.collect`, `atlas-ab-collect`).

plan.py (what to send) -> client.py (HTTP to one OpenAI-compatible server) -> collector.py (the
manifest, the request loop, raw/responses.jsonl, resume) -> atlas_ab.ingest (the raw answers into a
run directory); cli.py is the command line. The ingest only reads files; this package talks to servers.
"""
