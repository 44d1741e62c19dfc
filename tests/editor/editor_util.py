"""Helpers for the editor tests: temp projects, a dmypy driver, and a minimal LSP client.

Every subprocess gets a timeout; every daemon is stopped by the fixture that started it
(``dmypy stop``, then ``dmypy kill``, then a kill of the pid in its status file).
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

# A cold daemon start analyses torch (~25-55 s on 2 shared cores); checks after that take ~1 s.
CHECK_TIMEOUT_S = 240
QUICK_TIMEOUT_S = 60

# The module checked in every test: one spmd error at line 6.
SOURCE_V1 = '''\
import torch
from spmd import P, R, Tensor


def f(h: Tensor[P["tp"]]) -> None:
    torch.relu(h)


def g(x: Tensor[R["dp"]]) -> Tensor[R["dp"]]:
    return x * 2
'''
V1_ERRORS = {(6, "spmd-partial-nonlinear")}

# The edit: line 6 fixed, a different spmd error on line 11.
SOURCE_V2 = '''\
import torch
import spmd
from spmd import P, R, Tensor


def f(h: Tensor[P["tp"]]) -> None:
    torch.relu(spmd.all_reduce(h, "tp", src=P, dst=R))


def g(x: Tensor[R["dp"]], y: Tensor[P["dp"]]) -> Tensor[R["dp"]]:
    return x + y
'''
V2_ERRORS = {(11, "spmd-partial-affine")}

MYPY_INI = """\
[mypy]
plugins = spmd_mypy.plugin
cache_dir = {cache_dir}
# dmypy always runs with local_partial_types; setting it here too lets plain mypy and the daemon
# share one cache (and gives both the same semantics).
local_partial_types = True
cache_fine_grained = True

[spmd_mypy]
mesh_axes = {axes}
"""

# The module the session's warm cache is built from: torch and spmd, no user code (dmypy with
# --use-fine-grained-cache does not re-report errors of modules loaded unchanged from the cache,
# so the modules under test must not be in it).
WARM_MODULE = "import torch\nimport torch.nn.functional\nimport spmd\n"
# Its file, kept in each project and named in each daemon check: mypy loads a fine-grained
# cache at a daemon's first check only if at least half as many modules load from it as files
# are named (build.py: "Redoing load_graph without cache because too much was missing"), and
# a module the cache lacks (the one under test) loads nothing, so it alone analyses torch again.
WARM_FILE = "warm.py"

ERROR_LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z0-9-]+)\]$")


def tool_env() -> dict[str, str]:
    """The environment for mypy/dmypy/pylsp: this interpreter's scripts first on PATH
    (pylsp-mypy runs ``dmypy`` from PATH)."""
    env = dict(os.environ)
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.pop("MYPYPATH", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run(argv: list[str], cwd: Path, timeout: float = CHECK_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, cwd=cwd, env=tool_env(), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"timed out after {timeout} s: {argv}\nstdout:\n{e.stdout!r}\n"
                             f"stderr:\n{e.stderr!r}") from None


def mypy(cwd: Path, *args: str, timeout: float = CHECK_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    proc = run([sys.executable, "-m", "mypy", *args], cwd, timeout)
    assert "INTERNAL ERROR" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


def errors(output: str) -> set[tuple[int, str]]:
    """(line, code) of every error line of mypy's output."""
    found = set()
    for line in output.splitlines():
        m = ERROR_LINE.match(line.strip())
        if m:
            found.add((int(m["line"]), m["code"]))
    return found


def diagnostic_lines(output: str) -> list[str]:
    """The error/note lines of mypy's output (no summary line), sorted."""
    return sorted(line for line in output.splitlines() if re.match(r"^[^:]+:\d+: (error|note):", line))


def build_warm_cache(cache_dir: Path, workdir: Path) -> None:
    """Fill ``cache_dir`` with torch's and spmd's analysis (fine-grained, local partial types).

    Kept across pytest sessions (pytest's cache dir): mypy re-validates it in a few seconds and
    rebuilds it itself when mypy, torch or the plugin change."""
    workdir.mkdir(parents=True, exist_ok=True)
    write_project(workdir, cache_dir, "dp, tp")
    add_cached_module(workdir)
    proc = mypy(workdir, WARM_FILE, timeout=CHECK_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def add_cached_module(root: Path) -> None:
    """The warm cache's module, at the path it was cached under (a project's module that
    imports torch and spmd): a daemon check that names it loads the cache (WARM_FILE)."""
    (root / WARM_FILE).write_text(WARM_MODULE)


def copy_cache(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, dirs_exist_ok=True)


def write_project(root: Path, cache_dir: Path, axes: str) -> Path:
    ini = root / "mypy.ini"
    ini.write_text(MYPY_INI.format(cache_dir=cache_dir.as_posix(), axes=axes))
    return ini


class Dmypy:
    """A dmypy daemon for one project, addressed by its own status file.

    ``check`` and ``run`` also name the project's cached module (WARM_FILE) when it has one,
    so the daemon's first check loads the warm cache instead of analysing torch again; it
    has no errors, so the diagnostics are those of the files the test names."""

    def __init__(self, project: Path) -> None:
        self.project = project
        self.status_file = project / ".dmypy.json"
        self.log_file = project / "dmypy.log"

    def __call__(self, *args: str, timeout: float = CHECK_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        if args[:1] in (("check",), ("run",)) and (self.project / WARM_FILE).exists():
            args = (*args, WARM_FILE)
        proc = run([sys.executable, "-m", "mypy.dmypy", "--status-file", str(self.status_file), *args],
                   self.project, timeout)
        assert "INTERNAL ERROR" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr + self.log()
        assert "Traceback" not in proc.stderr, proc.stderr + self.log()
        return proc

    def log(self) -> str:
        try:
            return "\ndmypy log:\n" + self.log_file.read_text()[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        stop_daemon(self.status_file, self.project)


def stop_daemon(status_file: Path, cwd: Path) -> None:
    """Stop the daemon behind ``status_file`` however it can be done; never raises."""
    if not status_file.exists():
        return
    try:
        pid = int(json.loads(status_file.read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        pid = None
    base = [sys.executable, "-m", "mypy.dmypy", "--status-file", str(status_file)]
    for cmd in ("stop", "kill"):
        try:
            subprocess.run(base + [cmd], cwd=cwd, env=tool_env(), capture_output=True,
                           timeout=QUICK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            continue
        if not status_file.exists():
            break
    if pid is not None:
        _wait_gone(pid, 10)
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        status_file.unlink()
    except OSError:
        pass


def _wait_gone(pid: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# A minimal LSP client: JSON-RPC 2.0 with Content-Length framing over a subprocess' stdio.


class LspClient:
    def __init__(self, argv: list[str], cwd: Path, stderr_path: Path) -> None:
        self._stderr = open(stderr_path, "wb")
        self.stderr_path = stderr_path
        self.proc = subprocess.Popen(argv, cwd=cwd, env=tool_env(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr)
        self._inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._next_id = 0
        self._lock = threading.Lock()
        self.received: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    # -- framing ---------------------------------------------------------------------------------
    def _read_loop(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        try:
            while True:
                headers: dict[str, str] = {}
                while True:
                    raw = stream.readline()
                    if not raw:
                        return
                    line = raw.decode("ascii", "replace").strip()
                    if not line:
                        break
                    key, _, value = line.partition(":")
                    headers[key.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                body = stream.read(length)
                if len(body) < length:
                    return
                self._inbox.put(json.loads(body.decode("utf-8")))
        finally:
            self._inbox.put(None)

    def _send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode("utf-8")
        stdin = self.proc.stdin
        assert stdin is not None
        with self._lock:
            stdin.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
            stdin.flush()

    # -- messages --------------------------------------------------------------------------------
    def notify(self, method: str, params: Any) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params: Any, timeout: float = QUICK_TIMEOUT_S) -> Any:
        self._next_id += 1
        rid = self._next_id
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        msg = self.wait_for(lambda m: m.get("id") == rid and "method" not in m, timeout,
                            f"the response to {method}")
        if "error" in msg:
            raise AssertionError(f"{method} failed: {msg['error']}")
        return msg.get("result")

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what} within {timeout} s" + self.transcript())
            try:
                msg = self._inbox.get(timeout=left)
            except queue.Empty:
                continue
            if msg is None:
                raise AssertionError(f"the server exited (code {self.proc.poll()}) while waiting "
                                     f"for {what}" + self.transcript())
            self.received.append(msg)
            if "method" in msg and "id" in msg:  # a request from the server: accept it
                self._send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            if predicate(msg):
                return msg

    def transcript(self) -> str:
        tail = [json.dumps(m)[:600] for m in self.received[-15:]]
        try:
            err = self.stderr_path.read_text(errors="replace")[-4000:]
        except OSError:
            err = ""
        return "\nlast messages:\n" + "\n".join(tail) + "\nserver stderr:\n" + err

    def close(self) -> None:
        """shutdown + exit, then make sure the process is gone."""
        if self.proc.poll() is None:
            try:
                self.request("shutdown", None, timeout=QUICK_TIMEOUT_S)
                self.notify("exit", None)
            except (AssertionError, OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        self._stderr.close()
