"""vLLM's OpenAI server, started from its own environment, health-checked, and stopped.

The engine runs in the virtual environment scripts/setup_vllm.sh makes (ATLAS_VLLM_VENV, default
~/.cache/atlas_ab/vllm/venv), never in the project's: it pins its own torch and its own spawn of
processes. One server per port; its state (pid, URL, the command, the exported model) sits in
STATE_ROOT/<port>/server.json and its whole log beside it, so `stop` and a user can find both.

Defaults chosen to serve our model faithfully on a CPU (each a flag of vLLM's own):
  --dtype float32                      our runner's CPU arithmetic (the shipped bf16 weights upcast exactly)
  --no-enable-prefix-caching           every request prefills its whole context, drafter included, as
                                       our DRAFTER_PREFILL arms do; on, a turn's cached blocks keep the
                                       drafter rows its last request left (`--prefix-caching` turns it on)
  --per-request-spec-decode-metrics    detailed: every verify step's drafted / accepted count
  --enforce-eager                      no torch.compile: start-up in tens of seconds on 2 cores
  VLLM_CPU_KVCACHE_SPACE=2             GiB of KV cache: the CPU backend otherwise reserves a share of RAM
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from atlas_ab import AtlasError

VERSION = "0.32.0"                       # the vllm-cpu release scripts/setup_vllm.sh installs
CACHE = Path(os.environ.get("ATLAS_VLLM_CACHE", Path.home() / ".cache/atlas_ab/vllm"))
VENV = Path(os.environ.get("ATLAS_VLLM_VENV", CACHE / "venv"))
STATE_ROOT = CACHE / "servers"
START_TIMEOUT_S = 300.0                  # 43-51 s measured on 2 busy cores (shared/NOTES.md); CI may be busier
METRICS = ("detailed", "summary", "none")


def python() -> Path:
    """The engine's interpreter; one line naming the set-up when it is missing."""
    py = VENV / "bin" / "python"
    if not py.is_file():
        raise AtlasError(f"vLLM's environment not found ({py}): run `bash scripts/setup_vllm.sh` "
                         "(or point ATLAS_VLLM_VENV at one)")
    return py


@dataclass
class ServerSpec:
    """What to serve and how. `speculative` is vLLM's --speculative-config object, as vLLM takes it
    (None: no speculation)."""
    model_dir: str
    served_name: str = "default"
    speculative: dict | None = None
    port: int = 8011
    metrics: str = "detailed"
    prefix_caching: bool = False
    dtype: str = "float32"
    kv_cache_gib: int = 2
    max_model_len: int = 4096
    extra: list = field(default_factory=list)

    def command(self) -> list[str]:
        cmd = [str(python()), "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_dir,
               "--served-model-name", self.served_name, "--host", "127.0.0.1", "--port", str(self.port),
               "--dtype", self.dtype, "--max-model-len", str(self.max_model_len), "--seed", "0",
               "--enforce-eager"]
        tok = Path(self.model_dir) / "tokenizer"
        if tok.is_dir():     # the export's tokenizer alone: with config.json beside it transformers builds another
            cmd += ["--tokenizer", str(tok)]
        if not self.prefix_caching:
            cmd.append("--no-enable-prefix-caching")
        if self.speculative is not None:
            cmd += ["--speculative-config", json.dumps(self.speculative, separators=(",", ":"))]
            if self.metrics != "none":
                cmd += ["--per-request-spec-decode-metrics", self.metrics]
        return cmd + list(self.extra)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def state_dir(port: int) -> Path:
    return STATE_ROOT / str(port)


def _get(url: str, timeout: float = 2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _log_tail(log: Path, n: int = 1) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    errs = [ln for ln in lines if "Error" in ln or "error" in ln]
    return " | ".join((errs or lines)[-n:])[-400:]


def serve(spec: ServerSpec, timeout: float = START_TIMEOUT_S, out=sys.stderr) -> dict:
    """Start the server, wait until /health and /v1/models answer with the served name, and return
    its state (also written to server.json). Refused in one line if the port is taken; the process
    is stopped again if it does not come up, its log kept."""
    d = state_dir(spec.port)
    d.mkdir(parents=True, exist_ok=True)
    try:
        _get(f"http://127.0.0.1:{spec.port}/health", 1.0)
        raise AtlasError(f"port {spec.port} already answers: stop that server "
                         f"(python -m atlas_ab.engines.vllm stop --port {spec.port}) or choose --port")
    except (urllib.error.URLError, OSError):
        pass
    log = d / "server.log"
    cmd = spec.command()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(spec.kv_cache_gib), "VLLM_NO_USAGE_STATS": "1",
           "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)       # the engine imports its own packages only
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, cwd=str(d))
    state = {"pid": proc.pid, "url": spec.url, "port": spec.port, "log": str(log), "command": cmd,
             "spec": asdict(spec), "started": time.time(), "ready_s": None}
    t0 = time.monotonic()
    try:
        while True:
            if proc.poll() is not None:
                raise AtlasError(f"vLLM exited with code {proc.returncode} before it served "
                                 f"(log {log}): {_log_tail(log)}")
            if time.monotonic() - t0 > timeout:
                raise AtlasError(f"vLLM did not answer /health within {timeout:g} s (log {log}): {_log_tail(log)}")
            try:
                if _get(f"http://127.0.0.1:{spec.port}/health")[0] == 200:
                    models = json.loads(_get(spec.url + "/models")[1])
                    names = [m.get("id") for m in models.get("data", [])]
                    if spec.served_name not in names:
                        raise AtlasError(f"port {spec.port} serves {names}, not {spec.served_name!r}")
                    break
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.5)
    except BaseException:
        _terminate(proc.pid)
        raise
    state["ready_s"] = round(time.monotonic() - t0, 1)
    (d / "server.json").write_text(json.dumps(state, indent=2) + "\n")
    return state


def _terminate(pid: int, grace: float = 20.0) -> None:
    """SIGTERM the server's whole process group (API server, engine core, workers), then SIGKILL."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        if not alive(pid):
            break
        time.sleep(0.2)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop(port: int) -> dict | None:
    """Stop the server started on `port`; None if none was recorded there."""
    f = state_dir(port) / "server.json"
    if not f.is_file():
        return None
    state = json.loads(f.read_text())
    _terminate(int(state["pid"]))
    f.unlink()
    return state


class Server:
    """`with Server(spec) as state:` serves for the block and stops after it (tests, benches)."""

    def __init__(self, spec: ServerSpec, timeout: float = START_TIMEOUT_S):
        self.spec, self.timeout, self.state = spec, timeout, None

    def __enter__(self) -> dict:
        self.state = serve(self.spec, self.timeout)
        return self.state

    def __exit__(self, *exc) -> None:
        stop(self.spec.port)
