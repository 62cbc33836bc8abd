"""The telemetry contract is defined once (atlas_ab/telemetry/schema.py); everything else follows it."""
from pathlib import Path

import pyarrow as pa

from atlas_ab.telemetry import schema

ROOT = Path(__file__).resolve().parents[2]


def test_docs_tables_are_the_schema():
    doc = (ROOT / "docs" / "telemetry.md").read_text()
    assert schema.markdown_table(schema.STEP_COLUMNS) in doc
    assert schema.markdown_table(schema.EVENT_COLUMNS, required=False) in doc


def test_writer_and_reader_share_the_schema():
    from atlas_ab.analysis.runs import load
    from atlas_ab.telemetry import events, step_blocks

    assert step_blocks.STEP_SCHEMA is schema.STEP_SCHEMA
    assert events.EVENT_SCHEMA is schema.EVENT_SCHEMA
    assert load.REQUIRED == ("doc_id", "turn", "step", "k", "accept_len")
    assert load.INT_TYPES == {"doc_id": "int64", "turn": "int32", "step": "int64", "k": "int32",
                              "accept_len": "int32"}


def test_schema_module_is_torch_free():
    import subprocess
    import sys

    code = ("import sys, atlas_ab.telemetry.schema, atlas_ab.analysis, atlas_ab.analysis.__main__; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


def test_step_type():
    assert schema.step_type("position") == pa.int64()
    assert schema.step_type("nope") is None
