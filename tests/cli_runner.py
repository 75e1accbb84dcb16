"""The command line as the tests run it: ``placewise`` in a process of its own, as a user
runs it, without paying for a fresh interpreter each time.

Each command runs in a new process forked from a server that imported placewise's command
line and its heavy dependencies (torch, onnx, onnxruntime) once: multiprocessing's
``forkserver`` with those modules preloaded. The server never runs a model, so it has no
thread pools to lose in the fork. The child sets the command's environment, working folder
and argv, sends its stdout and stderr to files, and runs ``placewise.cli.main()`` as the
console script does: exit status, output and a crash stay the command's own. A command
that needs a fresh interpreter (start-up imports, its own signal handling) keeps
``subprocess``.

What differs from a fresh interpreter: environment variables are read when the command
reads them, not when placewise was imported (what is read at import, the hash seed and the
console's width, is the server's: ``_SERVER_ENV``, what every test sets), and the
process's start is the fork. A command whose environment changes what an interpreter
imports (``PYTHONPATH``: a test hiding a module) runs in a fresh interpreter.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CliProcess", "run_cli", "start_cli"]

_PRELOAD = ["placewise.cli", "torch", "onnx", "onnxruntime", "placewise.graph.load",
            "placewise.runtime.executor", "placewise.validate.run", "placewise.serve.real",
            "placewise.search.api", "placewise.report", "tests.cli_runner"]
#: the server's environment beyond the test process's: what every test runs commands with,
#: and what is read once at import (the console's width, the hash seed)
_SERVER_ENV = {"COLUMNS": "120", "TERM": "dumb", "PYTHONHASHSEED": "0"}
_CTX: Any = None


def _context() -> Any:
    """The forkserver context, its server started with the modules above preloaded."""
    global _CTX
    if _CTX is None:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        old = dict(os.environ)
        os.environ.update(_SERVER_ENV)
        try:
            from multiprocessing import forkserver

            forkserver.ensure_running()
        finally:
            os.environ.clear()
            os.environ.update(old)
        _CTX = ctx
    return _CTX


def _child(args: Sequence[str], env: Mapping[str, str], cwd: str | None, out: str,
           err: str) -> None:
    """The command, in the forked process (see the module docstring)."""
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(f, fd)
        os.close(f)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False, buffering=1)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False, buffering=1)  # noqa: SIM115
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115
    sys.argv = ["placewise", *args]
    from placewise.cli import main

    try:
        main()
    finally:  # as an interpreter exits: streams flushed, exit handlers run
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        atexit._run_exitfuncs()


class CliProcess:
    """One command started by ``start_cli``: ``wait`` for its ``CompletedProcess``."""

    def __init__(self, args: Sequence[str], env: Mapping[str, str], cwd: Path | str | None,
                 shown: Any) -> None:
        self._dir = tempfile.mkdtemp(prefix="pw-cli-")
        self._out, self._err = os.path.join(self._dir, "out"), os.path.join(self._dir, "err")
        for p in (self._out, self._err):
            Path(p).touch()
        self.args = shown
        self._proc = _context().Process(
            target=_child, args=(list(args), dict(env), None if cwd is None else str(cwd),
                                 self._out, self._err))
        self._proc.start()

    def wait(self, timeout: float | None = 600) -> subprocess.CompletedProcess[str]:
        p = self._proc
        p.join(timeout)
        try:
            if p.exitcode is None:
                p.kill()
                p.join()
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            out = Path(self._out).read_text(encoding="utf-8", errors="replace")
            err = Path(self._err).read_text(encoding="utf-8", errors="replace")
            # -N: killed by signal N, as subprocess reports it
            return subprocess.CompletedProcess(self.args, p.exitcode, out, err)
        finally:
            for f in (self._out, self._err):
                Path(f).unlink(missing_ok=True)
            os.rmdir(self._dir)

    def kill(self) -> None:
        if self._proc.exitcode is None:
            self._proc.kill()
            self._proc.join()


class _Fresh:
    """A command in a fresh interpreter (``subprocess``), for an environment that changes
    what an interpreter imports (``_FRESH_KEYS``)."""

    def __init__(self, args: Sequence[str], env: Mapping[str, str], cwd: Path | str | None,
                 shown: Any) -> None:
        self.args = shown
        self._proc = subprocess.Popen([sys.executable, "-m", "placewise.cli", *args],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=dict(env), cwd=cwd)

    def wait(self, timeout: float | None = 600) -> subprocess.CompletedProcess[str]:
        out, err = self._proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(self.args, self._proc.returncode, out, err)

    def kill(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()


#: variables an interpreter reads when it starts (where it imports from, its flags): a
#: command whose environment sets them otherwise than this process runs fresh
_FRESH_KEYS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE",
               "PYTHONWARNINGS", "PYTHONDEVMODE", "LD_PRELOAD", "LD_LIBRARY_PATH")


def start_cli(args: Sequence[str], *, env: Mapping[str, str] | None = None,
              cwd: Path | str | None = None, shown: Any = None) -> CliProcess | _Fresh:
    """Start ``placewise ARGS`` (module docstring); ``shown``: the ``args`` its
    ``CompletedProcess`` reports (default: ``[sys.executable, "-m", "placewise.cli", *ARGS]``,
    as ``subprocess.run`` of the module would). An ``env`` that changes what an interpreter
    imports (``_FRESH_KEYS``) gets a fresh interpreter."""
    if shown is None:
        shown = [sys.executable, "-m", "placewise.cli", *args]
    env = dict(os.environ) if env is None else dict(env)
    if any(env.get(k) != os.environ.get(k) for k in _FRESH_KEYS):
        return _Fresh(args, env, cwd, shown)
    return CliProcess(args, env, cwd, shown)


def run_cli(args: Sequence[str], *, env: Mapping[str, str] | None = None,
            cwd: Path | str | None = None, timeout: float | None = 600
            ) -> subprocess.CompletedProcess[str]:
    """``placewise ARGS`` to the end (module docstring), as ``subprocess.run`` with
    ``capture_output=True, text=True`` would give it."""
    p = start_cli(args, env=env, cwd=cwd)
    try:
        return p.wait(timeout)
    finally:
        p.kill()
