"""Every fault and bad input tried, with what the user sees: the table docs/faults.md is made from.

A `Case` names what was tried and the one line the user sees on stderr (`…` stands for any
text; `{run}`, `{tmp}`, `{a}`, `{b}` for the paths the test used). A case with `argv` is run as
written, in-process through the command's own `main()`, by
`tests/run/test_faults.py::test_every_bad_input_prints_its_line`; any other case by the test it
names, which calls `check(id, line)` on what the user saw. `tests/run/test_faults.py` also checks
that docs/faults.md is `render()`'s text and that every named test exists and checks its case.
Regenerate the doc with `python -m tests.helpers.faults > docs/faults.md`.
"""
from __future__ import annotations

import io
import os
import re
import sys
from dataclasses import dataclass
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLE_TEST = "tests/run/test_faults.py::test_every_bad_input_prints_its_line"
#: the arm runs with the fake runner on a tiny workload unless a case says `real`
FAKE = ("runner.engine._target_=tests.helpers.fakerunner.FakeRunner", "runner.device=cpu", "workload=tiny",
        "runner.progress=false")


@dataclass(frozen=True)
class Case:
    id: str
    tried: str                          # what the user did
    sees: str                           # the one line on stderr
    argv: Optional[tuple] = None        # ("atlas_ab", ...) or ("atlas_ab.analysis", ...): run as written
    test: str = TABLE_TEST              # the test that runs it
    also: str = ""                      # what else holds (exit status, what is left behind)
    real: bool = False                  # run the real runner (the checkpoint cases)


A = "atlas_ab: error: "
AN = "atlas_ab.analysis: error: "
FAULTS_TEST = "tests/run/test_faults.py::"
READ_TEST = "tests/analysis/test_data_read.py::"
PREREG_TEST = "tests/analysis/test_verdicts.py::test_a_bad_prereg_value_is_one_line_naming_the_field_and_leaves_nothing"

RUN_INPUT = [
    Case("run.unknown-arm", "an unknown arm", A + "unknown arm 'nosuch' (available: baseline, catchup_on, …)",
         ("atlas_ab", "+arm=nosuch")),
    Case("run.unknown-key", "a key no arm has",
         A + "unknown key arm.bogus; valid keys: name, proposer, num_drafts, …",
         ("atlas_ab", "+arm=refeed_on", "arm.bogus=1")),
    Case("run.typo-appended", "a typo of a lever, appended with `+`",
         A + "unknown key arm.refeeed (did you mean arm.refeed?); valid keys: …",
         ("atlas_ab", "+arm=catchup_on", "+arm.refeeed=true"), also="the run does not start with the lever off"),
    Case("run.typo-runner", "a typo of a runner key",
         A + "unknown key runner.batchwidth (did you mean runner.batch_width?); valid keys: …",
         ("atlas_ab", "+arm=baseline", "+runner.batchwidth=2")),
    Case("run.typo-workload", "a typo of a workload key",
         A + "unknown key workload.n_doc (did you mean workload.n_docs?); valid keys: …",
         ("atlas_ab", "+arm=baseline", "+workload.n_doc=3")),
    Case("run.typo-study", "a typo of a study key",
         A + "unknown key study.prereg (did you mean study.preregs?); valid keys: name, preregs, arms, kind, widths, "
         "k_max, waves, replicates, order_seed, slot, replicate, block, families, family, family_k",
         ("atlas_ab", "+arm=baseline", "+study.prereg=x")),
    Case("run.ladder-k-max", "a ladder study's K past the proposer's maximum",
         A + "study 'ladder_cpu': k_max=9 is beyond the mtp proposer's maximum K=8 (arm.num_drafts)",
         ("atlas_ab", "+study=ladder_cpu", "runner.batch_width=1", "arm.num_drafts=0", "study.k_max=9"),
         also="every job of the sweep refuses the whole grid before its model loads"),
    Case("run.ladder-memory", "a ladder study's width the memory cannot hold",
         A + "study 'ladder_cpu': batch width 100000000 needs ~… GiB on cpu (weights … GiB + … MiB per sequence, "
         "x1.3 headroom; an estimate), … GiB free: the widest that fits is …",
         ("atlas_ab", "+study=ladder_cpu", "runner.batch_width=1", "arm.num_drafts=0", "study.waves=0",
          "study.widths=[1,100000000]", "workload.n_docs=100000000"),
         also="refused before any run of the grid"),
    Case("run.plain-decode-lever", "K=0 (plain decode) with a drafter's lever",
         A + "arm 'catchup_on': num_drafts=0 is plain decode (no drafter): catchup has no effect; set it to its "
         "default", ("atlas_ab", "+arm=catchup_on", "arm.num_drafts=0")),
    Case("run.wrong-type-int", "a word for an integer", A + "arm.num_drafts='two': expected an integer",
         ("atlas_ab", "+arm=k1", "arm.num_drafts=two")),
    Case("run.wrong-type-bool", "a word for a bool", A + "arm.refeed='maybe': expected a bool (true or false)",
         ("atlas_ab", "+arm=refeed_on", "arm.refeed=maybe")),
    Case("run.out-of-range", "a lever out of its range",
         A + "arm 'refeed_on': draft_conf=1.5 is out of range [0.0, 0.99]",
         ("atlas_ab", "+arm=refeed_on", "arm.draft_conf=1.5")),
    Case("run.refeed-without-catchup", "REFEED without CATCHUP",
         A + "arm 'refeed_on': refeed=true requires catchup=true (the re-feed's rows are rebuilt by the catch-up feed)",
         ("atlas_ab", "+arm=refeed_on", "arm.catchup=false")),
    Case("run.carry-one-turn", "CARRY_DRAFTER on a workload of one turn (issue 50)",
         A + "arm 'reuse_carry': carry_drafter=true acts at a turn's start from the second turn on: "
             "workload.turns=1 has no second turn",
         ("atlas_ab", "+arm=reuse_carry", "workload.turns=1")),
    Case("run.carry-without-reuse", "CARRY_DRAFTER without PREFIX_REUSE (issue 50)",
         A + "arm 'reuse_carry': carry_drafter=true needs prefix_reuse=true (without it a document's turns are "
             "one request, whose drafter is never rebuilt: there is nothing to carry)",
         ("atlas_ab", "+arm=reuse_carry", "arm.prefix_reuse=false")),
    Case("run.mtp-lever-on-draft-model",
         "MTP levers on the draft-model proposer (was: \"catchup apply to the MTP proposer only\")",
         A + "arm 'draft_model': catchup and drafter_prefill apply to the MTP proposer only (proposer=draft_model "
             "has no MTP head); set them off or use proposer=mtp",
         ("atlas_ab", "+arm=draft_model", "arm.catchup=true", "arm.drafter_prefill=true")),
    Case("run.unknown-family", "an unknown drafter family",
         A + "arm 'baseline': proposer='medusa' is not a drafter family; one of mtp, draft_model, …",
         ("atlas_ab", "+arm=baseline", "arm.proposer=medusa")),
    Case("run.family-lever-out-of-range", "an n-gram lever out of its range",
         A + "arm 'ngram': prompt_lookup_max=0 is out of range [1, 64]",
         ("atlas_ab", "+arm=ngram", "arm.prompt_lookup_max=0")),
    Case("run.family-lever-on-another-family", "a suffix-decoding lever on the n-gram family",
         A + "arm 'ngram': suffix_decoding_min_token_prob applies to proposer=suffix only (this arm's is ngram)",
         ("atlas_ab", "+arm=ngram", "arm.suffix_decoding_min_token_prob=0.5")),
    Case("run.weightless-family-probability-lever", "DRAFT_CONF on suffix decoding (no probabilities to gate)",
         A + "arm 'suffix': draft_conf has no effect with proposer=suffix (no weights, no probabilities, no rows); "
             "set it off",
         ("atlas_ab", "+arm=suffix", "arm.draft_conf=0.5")),
    Case("run.gen-tokens-0", "nothing to generate",
         A + "workload: gen_tokens=0 is out of range >= 2 (a turn's prefill commits its first token; "
             "a verify step needs a second)",
         ("atlas_ab", "+arm=baseline", "workload.gen_tokens=0")),
    Case("run.gen-tokens-1",
         "one token per turn: the prefill's, no verify step (was: a `complete` run of 0 steps, \"gate passed\")",
         A + "workload: gen_tokens=1 is out of range >= 2 (a turn's prefill commits its first token; "
             "a verify step needs a second)",
         ("atlas_ab", "+arm=baseline", "workload.gen_tokens=1")),
    Case("run.gate-negative", "a negative count",
         A + "runner: gate_sequences=-1 is out of range >= 0",
         ("atlas_ab", "+arm=baseline", "runner.gate_sequences=-1")),
    Case("run.arch-with-checkpoint", "an architecture field with a checkpoint",
         A + "model 'default': model.hidden_size applies to init=random only; a checkpoint's architecture "
             "comes from its config.json",
         ("atlas_ab", "+arm=baseline", "model.hidden_size=64")),
    Case("run.model-path-required", "`model=path` without `model.path`",
         A + "model 'path': model.path is required (e.g. model=path model.path=DIR)",
         ("atlas_ab", "+arm=baseline", "model=path")),
    Case("run.arm-not-in-study", "an arm the study does not run",
         A + "arm 'k1' is not in study 'refeed' (arms: catchup_on, refeed_on)",
         ("atlas_ab", "+arm=k1", "+study=refeed")),
    Case("run.prereg-missing", "a study whose pre-registration file does not exist",
         A + "study 'refeed': pre-registration {tmp}/missing.yaml not found ({tmp}/missing.yaml)",
         ("atlas_ab", "+arm=catchup_on", "+study=refeed", "study.preregs=[{tmp}/missing.yaml]")),
    Case("run.missing-checkpoint", "a checkpoint that does not exist (the real runner)",
         A + "checkpoint directory not found: /nonexistent/ckpt",
         ("atlas_ab", "+arm=baseline", "model=path", "model.path=/nonexistent/ckpt"), real=True,
         also="was: an empty `steps/` and a `.lock` left beside the `failed` manifest"),
    Case("run.corrupt-checkpoint", "a checkpoint whose config.json is not JSON (the real runner)",
         A + "{tmp}/corrupt/config.json: invalid JSON (…)",
         ("atlas_ab", "+arm=baseline", "model=path", "model.path={tmp}/corrupt"), real=True),
    Case("run.unwritable-parent", "a run directory that cannot be made",
         A + "cannot write /proc/atlas_ab: No such file or directory",
         ("atlas_ab", "+arm=baseline", "hydra.run.dir=/proc/atlas_ab/run")),
    Case("run.resume-missing", "a resume of a directory that holds no run (was: \"AtlasError raised while "
         "resolving interpolation: cannot resume …\")",
         A + "cannot resume {tmp}/nothing: no manifest.json there (not a run directory)",
         ("atlas_ab", "+arm=baseline", "runner.resume={tmp}/nothing")),
    Case("run.eagle3-layers", "an EAGLE-3 head whose feature layers the target lacks (`+arm=eagle3 "
         "model.eagle3_path=DIR`, its config.json's eagle_aux_hidden_state_layer_ids [1, 3, 9] on the 6-layer "
         "default)",
         A + "{tmp}/head: EAGLE-3 feature layer 9 does not exist in the target …/models/default (6 layers: "
         "ids 0..6); eagle_aux_hidden_state_layer_ids=[1, 3, 9]",
         test="tests/proposers/test_eagle3_refusals.py::test_the_run_refuses_it_before_any_model_loads",
         also="exit 2, before any model loads (only the two config.json files are read); the run directory "
              "holds a `failed` manifest and no data"),
]

SEQ_TEST = "tests/study/test_sequential_study.py::test_bad_input_is_one_line_before_any_model_loads"
STUDY_INPUT = [
    Case("study.sequential-arm-given", "an arm chosen for a sequential study, whose one job runs all its arms",
         A + "study 'refeed_sequential' is sequential: one job runs all its arms (catchup_on, refeed_on) in "
             "lockstep; drop +arm=refeed_on", test=SEQ_TEST, also="exit 2; no arm directory, no study.json"),
    Case("study.sequential-looks-finer-than-a-wave", "a look every 2 clusters at 4 documents a wave",
         A + "pre-registration seq_test.yaml: sequential.look_every: a look every 2 clusters is finer than a wave "
             "of 4 documents (runner.batch_width); the runner looks only when a wave ends: look every wave "
             "(look_unit: wave) or every >= 4 clusters", test=SEQ_TEST, also="exit 2; only Hydra's .hydra/ left"),
    Case("study.sequential-arms-do-not-share-a-workload", "a sequential study whose arm file sets its own "
         "workload (`# @package _global_`, workload.turns: 2)",
         A + "sequential study 'refeed_sequential': its arms do not share a workload (catchup_on vs wide: "
             "workload.turns: 1 -> 2); a sequential study pairs its arms' documents wave by wave",
         test=SEQ_TEST, also="exit 2; only Hydra's .hydra/ left"),
]

RUN_FAULTS = [
    Case("run.two-at-once", "two fresh runs started together into one directory (was: both failed, 4 of 4)",
         A + "{run} is in use by pid …: a run directory is written by one process at a time (wait for it, "
             "or stop it first)",
         test=FAULTS_TEST + "test_two_runs_started_together_one_completes_the_other_touches_nothing",
         also="exit 2; the other run completes; the refused one wrote nothing (no failed manifest, no run.log line)"),
    Case("run.rerun-into-complete", "a fresh run into a directory holding a complete run",
         A + "{run} already holds a run; continue it with runner.resume={run} or choose another hydra.run.dir",
         test=FAULTS_TEST + "test_a_refused_run_leaves_the_run_it_refused_byte_identical",
         also="exit 2; every file of the run byte-identical (was: \"run failed\" lines appended to its run.log)"),
    Case("run.resume-config-differs", "`runner.resume=RUN` with a lever changed",
         A + "cannot resume {run}: config differs from the saved run: arm.num_drafts: 2 -> 3",
         test=FAULTS_TEST + "test_a_refused_run_leaves_the_run_it_refused_byte_identical",
         also="exit 2, refused before any model loads; the run byte-identical"),
    Case("run.read-only", "a run, `runner.resume=RUN` or `runner.resume=auto` into an existing read-only directory "
         "(a read-only bind mount) (was: a 56-line traceback, exit 1)",
         A + "run directory {run} is not writable: Read-only file system",
         test=FAULTS_TEST + "test_a_read_only_run_directory_is_one_line",
         also="exit 2, for each of the three"),
    Case("run.disk-full-at-start", "a run into a full file system (a full tmpfs) (was: \"cannot write : No space "
         "left on device\")",
         A + "run directory {run} is not writable: No space left on device",
         test=FAULTS_TEST + "test_a_full_disk_at_the_start_names_the_directory", also="exit 2"),
    Case("run.disk-full-midway", "the file system fills up during a run (a small tmpfs)",
         A + "cannot write {run}/…: No space left on device",
         test=FAULTS_TEST + "test_a_disk_that_fills_up_fails_the_run_and_resume_completes_it",
         also="exit 2; the manifest says `failed` with that error, no `*.tmp` is left (was: `running`, no error, "
              "manifest.json.tmp left); a resume once there is space completes the run"),
    Case("run.missing-shard-resume", "`runner.resume=RUN` of a complete run one of whose shards was deleted",
         "[…][atlas_ab][WARNING] - {run}: wave 1's shard is missing or no longer matches its sha256; "
         "it is recomputed",
         test=FAULTS_TEST + "test_resume_of_a_complete_run_rebuilds_a_missing_shard",
         also="on the console; exit 0; the shard is rebuilt byte-identical and the run is complete again (was: "
              "nothing rebuilt, \"complete\" with that shard's rows missing)"),
]

ANALYSIS_INPUT = [
    Case("analysis.mcnemar-depth-0", "depth 0 (was: \"1.0000 -> 1.0000\")",
         AN + "--depth 0: the depth is a draft's position, 1 or more (up to the arms' K)",
         ("atlas_ab.analysis", "mcnemar", "{a}", "{b}", "--depth", "0")),
    Case("analysis.mcnemar-depth-negative", "a negative depth",
         AN + "--depth -1: the depth is a draft's position, 1 or more (up to the arms' K)",
         ("atlas_ab.analysis", "mcnemar", "{a}", "{b}", "--depth", "-1")),
    Case("analysis.mcnemar-depth-beyond-k", "a depth beyond the arms' K (2)",
         AN + "{a}: depth 3 never observed (K=2)",
         ("atlas_ab.analysis", "mcnemar", "{a}", "{b}", "--depth", "3")),
    Case("analysis.compare-self", "a run against itself (was: a binomial sd of it)",
         AN + "{a} is given twice: a comparison needs two different runs",
         ("atlas_ab.analysis", "compare", "{a}", "{a}", "--bootstrap", "0")),
    Case("analysis.compare-copy", "a run against a copy of itself",
         AN + "{a} and {a_copy} hold the same step shards (equal sha256): a comparison needs two different runs",
         ("atlas_ab.analysis", "compare", "{a}", "{a_copy}", "--bootstrap", "0")),
    Case("analysis.mcnemar-self", "a run paired with itself",
         AN + "{a} is given twice: a comparison needs two different runs",
         ("atlas_ab.analysis", "mcnemar", "{a}", "{a}")),
    Case("analysis.mcnemar-no-probe", "the within-run test on a run without the ORACLE_P2 probe",
         AN + "{a}: arm 'catchup_on' ran without the ORACLE_P2 probe, so there is nothing to pair within it; run it "
              "with the probe (`python -m atlas_ab +arm=oracle_p2`, or arm.oracle_p2=true) or give two runs to "
              "pair them (`mcnemar RUN_A RUN_B`)", ("atlas_ab.analysis", "mcnemar", "{a}")),
    Case("analysis.power-sd-inf", "an infinite threshold (was: an OverflowError traceback)",
         AN + "--sd inf: must be a threshold in sd, > 0",
         ("atlas_ab.analysis", "power", "--p", "0.42", "--delta", "0.015", "--sd", "inf")),
    Case("analysis.power-sd-nan", "a NaN threshold (was: a ValueError traceback)",
         AN + "--sd nan: must be a threshold in sd, > 0",
         ("atlas_ab.analysis", "power", "--p", "0.42", "--delta", "0.015", "--sd", "nan")),
    Case("analysis.power-sd-negative", "a negative threshold", AN + "--sd -3.0: must be a threshold in sd, > 0",
         ("atlas_ab.analysis", "power", "--p", "0.42", "--delta", "0.015", "--sd", "-3")),
    Case("analysis.power-p-nan", "a NaN base rate", AN + "--p nan: must be a rate in [0, 1]",
         ("atlas_ab.analysis", "power", "--p", "nan", "--delta", "0.015", "--sd", "3")),
    Case("analysis.power-delta-zero", "no effect",
         AN + "--delta 0.0: must be a non-zero difference of rates, in [-1, 1]",
         ("atlas_ab.analysis", "power", "--p", "0.42", "--delta", "0", "--sd", "3")),
    Case("analysis.power-alpha", "an alpha of 1", AN + "--alpha 1.0: must be a two-sided alpha in (0, 1)",
         ("atlas_ab.analysis", "power", "--p", "0.42", "--delta", "0.015", "--alpha", "1")),
    Case("analysis.power-power", "a power of 1", AN + "--power 1.0: must be a power in (0, 1)",
         ("atlas_ab.analysis", "power", "--p", "0.42", "--delta", "0.015", "--sd", "3", "--power", "1")),
    Case("analysis.power-icc", "a negative ICC", AN + "--icc -0.1: must be an intra-document correlation in [0, 1]",
         ("atlas_ab.analysis", "power", "--p", "0.42", "--delta", "0.015", "--sd", "3", "--icc", "-0.1")),
    Case("analysis.power-m-inf", "infinitely many steps per document (was: a ValueError traceback)",
         AN + "--m inf: must be steps per document, >= 1",
         ("atlas_ab.analysis", "power", "--p", "0.42", "--delta", "0.015", "--sd", "3", "--m", "inf")),
    Case("analysis.power-n", "a negative n", AN + "--n -3: must be steps per arm, >= 1",
         ("atlas_ab.analysis", "power", "--p", "0.42", "--delta", "0.015", "--sd", "3", "--n", "-3")),
    Case("analysis.ungated", "a verdict on a run whose lossless gate checked nothing",
         AN + "{ungated}: its lossless gate checked no sequence, so nothing shows its drafts were verified "
              "losslessly; no verdict on it (pass --allow-ungated to judge anyway)",
         ("atlas_ab.analysis", "report", "{ungated}", "{b}", "--prereg", "{prereg}", "--out", "{tmp}/rep",
          "--bootstrap", "0")),
    Case("analysis.locked-differently", "a report on arms whose manifests locked different texts of one "
         "pre-registration", AN + "pre-registration refeed_p2_uncond.yaml: the runs carry different locked hashes …",
         ("atlas_ab.analysis", "report", "{locked_a}", "{locked_b}", "--out", "{tmp}/rep2", "--bootstrap", "0")),
    Case("analysis.prereg-nan", "a pre-registration with `threshold_sd: .nan` (was: NOT MET, \"below the threshold "
         "nan sd\")", AN + "{tmp}/bad.yaml: threshold_sd: must be a finite number > 0, got nan", test=PREREG_TEST),
    Case("analysis.prereg-inf", "`min_effect: .inf` (was: a traceback from the plotting code and an empty report "
         "directory)", AN + "{tmp}/bad.yaml: min_effect: must be a finite number > 0, got inf", test=PREREG_TEST,
         also="no report directory"),
    Case("analysis.prereg-negative-n", "`min_n_per_arm: -5` (was: MET)",
         AN + "{tmp}/bad.yaml: min_n_per_arm: must be a whole number >= 1, got -5", test=PREREG_TEST),
    Case("analysis.prereg-fractional-n", "`min_n_per_arm: 10.7` (was: MET, read as 10)",
         AN + "{tmp}/bad.yaml: min_n_per_arm: Value '10.7' of type 'float' could not be converted to Integer",
         test=PREREG_TEST),
    Case("analysis.prereg-bool", "`threshold_sd: true` (was: MET at a threshold of 1)",
         AN + "{tmp}/bad.yaml: threshold_sd: Value 'True' of type 'bool' could not be converted to Float",
         test=PREREG_TEST),
    Case("analysis.prereg-word", "`threshold_sd: \"three\"` (was: \"could not convert string to float\", no field "
         "named)", AN + "{tmp}/bad.yaml: threshold_sd: Value 'three' of type 'str' could not be converted to Float",
         test=PREREG_TEST),
    Case("analysis.prereg-same-arm", "a pre-registration whose control is its treatment (was: a verdict of an arm "
         "against itself)", AN + "{tmp}/bad.yaml: arms: control and treatment are the same arm 'catchup_on': "
         "nothing to compare", test=PREREG_TEST),
    Case("analysis.not-complete", "a run whose manifest says `running`",
         AN + "{running}/manifest.json: run status is 'running', not 'complete' (pass --allow-incomplete to "
              "analyse it anyway)",
         ("atlas_ab.analysis", "compare", "{a}", "{running}", "--bootstrap", "0")),
]

DATA_READ = [
    Case("read.swapped-shard", "a shard replaced by another arm's shard",
         AN + "{b}/steps/part-00000.parquet: sha256 …, but manifest.json lists … for it (the file was replaced "
              "or rewritten after the run): refused",
         test=READ_TEST + "test_a_shard_swapped_from_another_arm_is_refused"),
    Case("read.shortened-shard", "a shard rewritten with fewer rows",
         AN + "{b}/steps/part-00000.parquet: … rows, but manifest.json lists … for it (the file was rewritten "
              "after the run): refused",
         test=READ_TEST + "test_a_shortened_shard_is_refused"),
    Case("read.unlisted-shard", "a `complete` manifest with one shard entry removed (was: a warning, then the "
         "analysis of the rest)",
         AN + "{b}/steps/part-00001.parquet: not listed in the complete run's manifest.json shards (an entry was "
              "removed or a file added after the run): refused",
         test=READ_TEST + "test_a_shard_entry_removed_from_a_complete_manifest_is_refused"),
    Case("read.row-total", "a `complete` manifest whose shard entry and file were both removed",
         AN + "{b}/manifest.json: lists … step rows in all, but its shards hold …: refused",
         test=READ_TEST + "test_a_shard_entry_removed_from_a_complete_manifest_is_refused"),
    Case("read.counts-shard", "an engine run's per-request counts shard rewritten with fewer rows",
         AN + "{run}/counts/part-00000.parquet: … rows, but manifest.json lists … for it (the file was rewritten "
              "after the run): refused",
         test=READ_TEST + "test_an_engine_runs_counts_shard_is_checked_too"),
    Case("read.unhashed", "a run written before shard hashes (as the 2026-11-29 claims runs were)",
         "atlas_ab.analysis: warning: {run}: manifest.json records no shard sha256 (written before shard hashes): "
         "its shards' row counts are checked, their bytes are not",
         test=READ_TEST + "test_a_run_written_before_shard_hashes_loads_with_one_warning",
         also="exit 0: the analysis runs"),
]

SECTIONS = [
    ("Running an arm: bad input", "`python -m atlas_ab ARGS` (the test adds the fake runner, `workload=tiny` and "
     "`hydra.run.dir`): one line on stderr, exit 2, before any model loads; a directory Hydra made for the run "
     "holds a `failed` manifest and no data (no `steps/`, no `.lock`).", RUN_INPUT),
    ("Running an arm: faults", "What a user (or a full disk) can do to a run directory.", RUN_FAULTS),
    ("Running a sequential study: bad input", "`python -m atlas_ab [-m] +study=NAME` where a registration "
     "declares `sequential:` (the test adds the fake runner): one line, exit 2, before any model loads.",
     STUDY_INPUT),
    ("Analysis: bad input", "`python -m atlas_ab.analysis ARGS`: one line on stderr, exit 2 (warnings aside).",
     ANALYSIS_INPUT),
    ("Analysis: the data read is the data written", "Each shard's row count and sha256 are in the manifest and "
     "checked at load.", DATA_READ),
]
CASES = {c.id: c for _, _, cases in SECTIONS for c in cases}


def pattern(sees: str, **paths) -> re.Pattern:
    """`sees` as a regex: `…` any text, `{name}` the path given for it, the rest literal."""
    out = ""
    for part in re.split(r"(…|\{[a-z_]+\})", sees):
        if part == "…":
            out += ".*"
        elif part.startswith("{") and part.endswith("}") and part[1:-1] in paths:
            out += re.escape(str(paths[part[1:-1]]))
        else:
            out += re.escape(part)
    return re.compile(out)


def check(case_id: str, line: str, **paths) -> None:
    """Assert `line` is what the doc says the user sees for `case_id`."""
    sees = CASES[case_id].sees
    assert pattern(sees, **paths).fullmatch(line.strip()), f"{case_id}: saw {line.strip()!r}, the doc says {sees!r}"


def main_of(program: str, argv: list[str]) -> tuple[int, str]:
    """Run `python -m PROGRAM ARGV` in this process; (exit status, stderr)."""
    import logging

    old_argv, old_err, old_env = sys.argv, sys.stderr, os.environ.get("HYDRA_FULL_ERROR")
    old_raise = logging.raiseExceptions
    err = io.StringIO()
    sys.argv, sys.stderr = [program, *argv], err
    try:
        if program == "atlas_ab":
            from atlas_ab.__main__ import main
            code = main()
        else:
            from atlas_ab.analysis.__main__ import main as analysis_main
            code = analysis_main(argv)
    except SystemExit as e:
        code = e.code
    finally:
        sys.argv, sys.stderr = old_argv, old_err
        logging.raiseExceptions = old_raise
        if old_env is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = old_env
    return int(code or 0), err.getvalue()


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    """`text` as a Markdown code span (double backticks when it holds one)."""
    return f"`` {_cell(text)} ``" if "`" in text else f"`{_cell(text)}`"


def render() -> str:
    """docs/faults.md."""
    lines = ["# Faults and bad input: what the user sees", "",
             "<!-- generated by `python -m tests.helpers.faults > docs/faults.md` from tests/helpers/faults.py; "
             "tests/run/test_faults.py checks it and runs every case -->", "",
             "Every fault and bad input tried, and the line the user sees, on stderr unless said (`…` stands for",
             "any text, `{run}` for the run directory, `{a}` `{b}` for run directories given to the analysis). Each",
             "row is a test: a row with a command is run as written by",
             "`" + TABLE_TEST + "`, the others by the test named. A line",
             "that changes fails its test until this table says so.", ""]
    for title, intro, cases in SECTIONS:
        lines += [f"## {title}", "", intro, "", "| case | tried | the user sees | also |", "|---|---|---|---|"]
        for c in cases:
            tried = c.tried + ("" if c.argv is None else f": `python -m {' '.join(c.argv)}`")
            also = c.also + ("" if c.test == TABLE_TEST else ("; " if c.also else "") + f"test: `{c.test}`")
            lines.append(f"| `{c.id}` | {_cell(tried)} | {_code(c.sees)} | {_cell(also)} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render())
