"""The lever table and the reference engine's ATLAS_MTP_* env parse (atlas_ab/config/levers.py).

(tests/config/test_levers.py, named for this in the brief, holds another engineer's
runner-level lever invariants; these are the front end's lever tests.)
"""
import math
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from atlas_ab import AtlasError
from atlas_ab.config.levers import (
    LEVERS,
    arm_from_env,
    arm_of,
    arm_to_env,
    env_draft_conf,
    env_lines,
    env_num_drafts,
    env_refeed_shift,
    env_shadow_topk,
    env_switch,
    resolved_levers,
    table_markdown,
)
from atlas_ab.config.paths import CONF_DIR
from atlas_ab.config.structured import ArmConfig, validate_arm
from tests.helpers.compose import cfg_of

ARMS = sorted(p.stem for p in (CONF_DIR / "arm").glob("*.yaml"))
ROOT = Path(__file__).resolve().parents[2]


def test_every_arm_field_is_a_lever():
    assert {lv.name for lv in LEVERS} | {"name"} == {f.name for f in fields(ArmConfig)}
    assert "ATLAS_MTP_NUM_DRAFTS" in table_markdown() and "(ours)" in table_markdown()


@pytest.mark.parametrize("value,expected", [
    (None, 0.0), ("", 0.0), ("abc", 0.0), (" 0.5", 0.0), ("0.5 ", 0.0), ("0,5", 0.0), ("1_0", 0.0),
    ("0.5", 0.5), ("0.66", 0.66), (".5", 0.5), ("5.", 0.99), ("+0.25", 0.25), ("-0.3", 0.0),
    ("5", 0.99), ("0.995", 0.99), ("1e-1", 0.1), ("1E-1", 0.1), ("inf", 0.99), ("-Infinity", 0.0),
    ("NaN", 0.0), ("1e400", 0.99), (".", 0.0), ("e5", 0.0), ("0x1", 0.0),
])
def test_draft_conf_parses_f32_and_clamps(value, expected):
    got = env_draft_conf(value)
    assert got == expected and not math.isnan(got)


@pytest.mark.parametrize("value,expected", [
    (None, 0), ("", 0), ("x", 0), ("4", 4), ("+4", 4), ("8", 8), ("9", 8), ("99", 8), ("-1", 0), ("-0", 0),
    (" 4", 0), ("4.0", 0), ("18446744073709551615", 8), ("18446744073709551616", 0), ("٣", 0),
])
def test_shadow_topk_parses_usize_min_8(value, expected):
    assert env_shadow_topk(value) == expected


@pytest.mark.parametrize("value,expected", [
    (None, 0), ("", 0), ("one", 0), ("1", 1), ("-1", -1), ("+2", 2), ("-4", -4), ("-5", -4), ("9", 4),
    ("9223372036854775807", 4), ("9223372036854775808", 0), ("-9223372036854775808", -4),
    ("-9223372036854775809", 0), ("1.0", 0), (" 1", 0), ("-", 0), ("+", 0),
])
def test_refeed_shift_parses_isize_clamped(value, expected):
    assert env_refeed_shift(value) == expected


@pytest.mark.parametrize("value,on", [("1", True), ("0", False), ("true", False), ("yes", False),
                                      (" 1", False), ("1 ", False), ("01", False), ("", False), (None, False)])
def test_switches_are_on_only_for_exactly_1(value, on):
    assert env_switch(value) is on


def test_num_drafts_is_ours_with_default_2():
    assert env_num_drafts(None) == 2 and env_num_drafts("x") == 2
    assert env_num_drafts("3") == 3 and env_num_drafts("0") == 1 and env_num_drafts("12") == 8


def test_arm_from_env_reads_every_var():
    arm = arm_from_env({"ATLAS_MTP_CATCHUP": "1", "ATLAS_MTP_REFEED_ACCEPTED": "1", "ATLAS_MTP_REFEED_SHIFT": "-7",
                        "ATLAS_MTP_DRAFT_CONF": "0.66", "ATLAS_MTP_SHADOW_TOPK": "12",
                        "ATLAS_MTP_ORACLE_P2": "1", "ATLAS_MTP_DRAFTER_PREFILL": "1",
                        "ATLAS_MTP_REFEED_DEBUG": "0", "ATLAS_MTP_NUM_DRAFTS": "3", "UNRELATED": "1"})
    assert (arm.catchup, arm.refeed, arm.refeed_shift, arm.draft_conf, arm.shadow_topk) == (True, True, -4, 0.66, 8)
    assert (arm.oracle_p2, arm.drafter_prefill, arm.fingerprints, arm.num_drafts) == (True, True, False, 3)
    validate_arm(arm)
    empty = arm_from_env({})
    assert resolved_levers(empty) == resolved_levers(ArmConfig(name="env"))


def test_env_path_clamps_where_hydra_path_refuses():
    arm = arm_from_env({"ATLAS_MTP_DRAFT_CONF": "1.5"})
    assert arm.draft_conf == 0.99
    with pytest.raises(AtlasError, match="out of range"):
        validate_arm(ArmConfig(draft_conf=1.5))
    # REFEED without CATCHUP parses (the engine would run it) but is refused when run.
    loose = arm_from_env({"ATLAS_MTP_REFEED_ACCEPTED": "1"})
    assert loose.refeed and not loose.catchup
    with pytest.raises(AtlasError, match="requires catchup"):
        validate_arm(loose)


@pytest.mark.parametrize("name", ARMS)
def test_every_arm_round_trips_through_env(name):
    arm = arm_of(cfg_of(f"+arm={name}"))           # what compose_arm gives (the `env` CLI test below runs it)
    back = arm_from_env(arm_to_env(arm), name=name)
    for lv in LEVERS:
        if lv.env is not None:
            assert resolved_levers(back)[lv.name] == resolved_levers(arm)[lv.name], lv.name


@pytest.mark.slow        # a subprocess CLI; the in-process round trip above stays fast
def test_levers_env_cli_prints_sourceable_lines():
    r = subprocess.run([sys.executable, "-m", "atlas_ab.config.levers", "env", "+arm=shift_m1"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if not ln.startswith("#")]
    env = dict(ln.split("=", 1) for ln in lines)
    assert all(k.startswith(("ATLAS_MTP_", "ATLAS_GLM_MTP_")) for k in env)   # the GLM head's own: issue 50
    assert env["ATLAS_MTP_REFEED_SHIFT"] == "-1" and env["ATLAS_MTP_CATCHUP"] == "1"
    assert env["ATLAS_MTP_REFEED_ACCEPTED"] == "1" and env["ATLAS_MTP_REFEED_DEBUG"] == "1"
    # sourceable: bash reads it back
    sh = subprocess.run(["bash", "-c", 'set -a; eval "$0"; echo "$ATLAS_MTP_REFEED_SHIFT"', r.stdout],
                        capture_output=True, text=True)
    assert sh.stdout.strip() == "-1"
    bad = subprocess.run([sys.executable, "-m", "atlas_ab.config.levers", "env", "+arm=shift_m1", "arm.refeed_shift=9"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "out of range" in bad.stderr


def test_env_lines_name_the_arm():
    lines = env_lines(ArmConfig(name="x", catchup=True))
    assert lines[0] == "# atlas_ab arm x" and "ATLAS_MTP_CATCHUP=1" in lines


def test_compose_configs_gives_the_checked_configs_a_run_would_use():
    from atlas_ab.run.session import compose_configs
    c = compose_configs(["+arm=refeed_on", "runner.batch_width=4", "arm.fingerprints=false"])
    assert (c.arm.catchup, c.arm.refeed, c.arm.fingerprints, c.runner.batch_width) == (True, True, False, 4)
    with pytest.raises(AtlasError, match="requires catchup"):
        compose_configs(["+arm=refeed_on", "arm.catchup=false"])
