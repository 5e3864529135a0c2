"""Notebook kernels, measuring processes and lab 9's ranks for the test run, forked from a
process that has already imported torch.

A new ``python -m ipykernel_launcher`` spends about 4 CPU-seconds importing torch, Numba, plotly
and ipykernel before a notebook's first cell runs, a measuring process (``python -m
helpers.device.worker``) or a gloo rank of lab 9's check about as long, and ``make test`` starts
some ninety of them. Under pytest (the root and tests' ``conftest.py``) such a command becomes
``python kernel_zygote.py launch <the command>``: a small client that asks a *zygote* (one per
interpreter and environment, started by the first process of that environment, gone after
:data:`IDLE_S` without work) to fork the process from its preloaded state with the client's
standard streams, working folder and environment; it relays signals to the process group and
exits as the process exits. Where it cannot, the client becomes the ordinary process (``exec``).
``WORKBOOK_KERNEL_ZYGOTE=0`` turns it off. Nothing of the workbook is preloaded: ``import
helpers`` still chooses the simulator or the GPU in each process, before ``numba.cuda``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import sys
import tempfile
import time

#: Modules a kernel imports that the zygote imports once (never numba.cuda or the workbook's own).
PRELOAD = ("numpy", "torch", "numba", "plotly.graph_objects", "ipywidgets", "psutil", "tqdm",
           "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell")
#: Variables that differ from one kernel to the next and that nothing preloaded reads (names
#: that start so, and the shell's ``_``).
#: torch sets ``TORCHINDUCTOR_CACHE_DIR`` in a process once anything reaches its compiler's cache
#: (a test worker, after some test); read when a kernel compiles, never on import.
PER_KERNEL = ("JPY_", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_", "WORKBOOK_KERNEL_ZYGOTE",
              "TORCHINDUCTOR_CACHE_DIR")
#: Seconds a zygote without a running kernel waits for the next request before it ends.
IDLE_S = 300.0
#: Seconds the first process of an environment waits for the zygote it started (its imports take
#: about as long as the process's own would) before it starts on its own.
START_S = 90.0
#: Signals the client passes on to the kernel's process group.
RELAYED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
#: The modules a zygote runs (``python -m <module> ...``): a notebook kernel, and the measuring
#: process of :mod:`helpers.device.worker` (the explorers' tests start some thirty).
MODULES = ("ipykernel_launcher", "helpers.device.worker")
#: The scripts a zygote runs (``python <script> ...``), under the workbook's folder: one gloo rank
#: of lab 9's check on real processes (:mod:`helpers.checks.lab9.real` starts two or three).
SCRIPTS = ("helpers/checks/lab9/rank.py",)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script(cmd: list[str]) -> bool:
    return len(cmd) >= 2 and os.path.realpath(cmd[1]) in {
        os.path.realpath(os.path.join(_ROOT, s)) for s in SCRIPTS}


def _served(cmd: list[str]) -> bool:
    return (len(cmd) >= 3 and cmd[1] == "-m" and cmd[2] in MODULES) or _script(cmd)


def command(cmd: list[str]) -> list[str]:
    """A command of :data:`MODULES` (``[python, "-m", "ipykernel_launcher", ...]``) or
    :data:`SCRIPTS` (``[python, ".../rank.py", ...]``) rewritten to start through the zygote; any
    other command, or with ``WORKBOOK_KERNEL_ZYGOTE=0``, unchanged."""
    if (os.environ.get("WORKBOOK_KERNEL_ZYGOTE") == "0" or not _served(cmd)
            or not hasattr(os, "fork") or not hasattr(socket, "send_fds")):
        return cmd
    return [cmd[0], os.path.abspath(__file__), "launch", *cmd]


def _key(python: str, env: dict) -> str:
    """The zygote that may serve a kernel: same interpreter, same environment (but PER_KERNEL)."""
    kept = sorted((k, v) for k, v in env.items() if not k.startswith(PER_KERNEL) and k != "_")
    text = json.dumps([os.path.realpath(python), kept])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _paths(key: str) -> tuple[str, str]:
    folder = os.path.join(tempfile.gettempdir(), f"workbook-kernels-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    if os.stat(folder).st_uid != os.getuid():
        raise PermissionError(f"{folder} belongs to another user")
    return os.path.join(folder, key + ".sock"), os.path.join(folder, key + ".lock")


# ------------------------------------------------------------------------------------------
# The client: the process Jupyter started and watches.
# ------------------------------------------------------------------------------------------

def _launch(cmd: list[str]) -> None:
    """Run ``cmd`` (a kernel) forked from the zygote, or ``exec`` it when that is not possible."""
    try:
        conn, group = _request(cmd)
    except Exception:  # noqa: BLE001  (no zygote, or it declined: the ordinary kernel)
        os.execv(cmd[0], cmd)
    try:
        _follow(conn, group)
    finally:  # only if following the kernel failed: it must not outlive this process
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)
        os._exit(1)


def _request(cmd: list[str]) -> tuple[socket.socket, int]:
    """Ask the zygote for a kernel: the connection and the kernel's pid, or an error."""
    sock_path, lock_path = _paths(_key(cmd[0], dict(os.environ)))
    conn = _connect(sock_path)
    if conn is None:  # none serves this environment yet: start one, or wait for the one starting
        conn = _connect_when_started(_start_zygote(cmd[0], sock_path, lock_path), sock_path,
                                     lock_path)
    request = json.dumps({"argv": cmd, "cwd": os.getcwd(), "env": dict(os.environ)})
    socket.send_fds(conn, [request.encode()], [0, 1, 2])
    reply = json.loads(conn.recv(1 << 16) or b'{"declined": "the zygote ended"}')
    if "pid" not in reply:
        conn.close()
        raise RuntimeError(reply["declined"])
    return conn, reply["pid"]


def _follow(conn: socket.socket, group: int) -> None:
    """Relay signals to the kernel's process group until it ends, then end the same way."""

    def relay(signum, frame):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signum)

    for name in RELAYED:
        signal.signal(getattr(signal, name), relay)
    message = conn.recv(1 << 16)
    if not message:  # the zygote died first: take the kernel with it, as its death would
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        os._exit(1)
    code = json.loads(message)["exit"]
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def _connect(sock_path: str) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(sock_path)
    except OSError:
        conn.close()
        return None
    return conn


def _start_zygote(python: str, sock_path: str, lock_path: str):
    """Start a zygote in the background (its ``Popen``), unless one is starting or serving
    already (it holds the lock: None)."""
    import subprocess

    if _held(lock_path):
        return None
    return subprocess.Popen([python, os.path.abspath(__file__), "serve", sock_path, lock_path],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd="/", start_new_session=True)


def _connect_when_started(started, sock_path: str, lock_path: str) -> socket.socket:
    """A connection to the zygote of ``sock_path`` once it listens, within :data:`START_S`.

    ``started`` is the zygote this client started, or None; one that ends at once lost the lock
    to another starting at the same moment, which is then waited for in the same way.

    Raises:
        RuntimeError: no zygote held the lock for :data:`_GONE_S` (the one starting ended
            first), or none listened in time.
    """
    end, free_since = time.monotonic() + START_S, None
    while time.monotonic() < end:
        conn = _connect(sock_path)
        if conn is not None:
            return conn
        if started is None or started.poll() is not None:
            now = time.monotonic()
            if _held(lock_path):
                free_since = None
            elif free_since is None:
                free_since = now
            elif now - free_since > _GONE_S:
                raise RuntimeError("the zygote ended before it listened")
        time.sleep(0.05)
    raise RuntimeError(f"the zygote did not listen within {START_S:g} s")


#: Seconds the lock may stay free before a waiting client takes the zygote for gone (one just
#: started takes the lock first thing, before its imports).
_GONE_S = 5.0


def _held(lock_path: str) -> bool:
    import fcntl

    with open(lock_path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False


# ------------------------------------------------------------------------------------------
# The zygote.
# ------------------------------------------------------------------------------------------

def _serve(sock_path: str, lock_path: str) -> None:
    import fcntl
    import importlib
    import selectors

    lock = open(lock_path, "a")  # noqa: SIM115  (held for the zygote's whole life)
    for _ in range(20):  # a client looking whether the lock is held holds it a moment
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            time.sleep(0.05)
    else:
        return  # another zygote for this key is starting or serving
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")  # who serves this key (to stop it: kill that pid)
    lock.flush()
    sys.path.pop(0)  # this script's folder; a kernel's own working folder takes its place
    key = _key(sys.executable, dict(os.environ))
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1
    refusal = (f"the zygote runs {threads} threads after its imports; forking it is unsafe"
               if threads > 1 else "")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sock_path)
    listener.bind(sock_path)
    listener.listen(16)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    kernels: dict[int, socket.socket] = {}  # kernel pid -> its client's connection
    held = [lock, listener, selector]  # what a forked kernel closes first
    last = time.monotonic()
    try:
        while kernels or time.monotonic() - last < IDLE_S:
            for ready, _ in selector.select(timeout=0.2):
                if ready.fileobj is listener:
                    conn, _ = listener.accept()
                    try:
                        pid = _fork_kernel(conn, key, refusal, held, kernels)
                    except Exception:  # noqa: BLE001  (a broken request: the client execs)
                        pid = 0
                    if pid:
                        kernels[pid] = conn
                        selector.register(conn, selectors.EVENT_READ, pid)
                    else:
                        conn.close()
                    last = time.monotonic()
                elif not ready.fileobj.recv(1):  # the client is gone: kill its kernel
                    selector.unregister(ready.fileobj)
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(ready.data, signal.SIGKILL)
            _reap(kernels, selector)
            if kernels:
                last = time.monotonic()
    finally:
        with contextlib.suppress(OSError):
            if os.stat(sock_path).st_ino == os.fstat(listener.fileno()).st_ino:
                os.unlink(sock_path)
        listener.close()


def _reap(kernels: dict, selector) -> None:
    """Tell each client whose kernel ended how it ended (-signal or the exit status)."""
    while kernels:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = kernels.pop(pid, None)
        if conn is None:
            continue
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(conn)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        with contextlib.suppress(OSError):
            conn.send(json.dumps({"exit": code}).encode())
        conn.close()


def _fork_kernel(conn, key: str, refusal: str, held: list, kernels: dict) -> int:
    """Fork one kernel for the request on ``conn``; its pid, or 0 if declined (said on conn)."""
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    try:
        request = json.loads(message)
        argv, env = request["argv"], request["env"]
        why = refusal or (
            "another environment" if _key(argv[0], env) != key else
            "another interpreter" if os.path.realpath(argv[0]) != os.path.realpath(
                sys.executable) else
            f"not a command of {MODULES} or {SCRIPTS}" if not _served(argv) else "")
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        why = f"a broken request ({exc})"
    if why or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):
            conn.send(json.dumps({"declined": why or "no standard streams"}).encode())
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            for thing in (*held, *kernels.values(), conn):
                thing.close()
            _become_kernel(argv, request["cwd"], env, fds)
        finally:
            os._exit(1)
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):  # a client gone already: its end is seen closed next
        conn.send(json.dumps({"pid": pid}).encode())
    return pid


def _become_kernel(argv: list[str], cwd: str, env: dict, fds: list[int]) -> None:
    """In the forked child: become ``python -m <module> ...`` or ``python <script> ...``
    started in ``cwd``."""
    import atexit
    import runpy
    import threading

    os.setsid()  # a process group of its own, which the client signals
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for name in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCHLD"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    script = argv[1] != "-m"
    # as `python <script>` and `python -m` put it
    sys.path.insert(0, os.path.dirname(os.path.realpath(argv[1])) if script else os.getcwd())
    sys.argv = argv[1:] if script else argv[2:]
    code = 0
    try:
        if script:
            runpy.run_path(argv[1], run_name="__main__")
        else:
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001  (reported as an uncaught error would be)
        import traceback
        traceback.print_exc()
        code = 1
    with contextlib.suppress(Exception):
        threading._shutdown()  # as the interpreter's own exit: non-daemon threads, then atexit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    if sys.argv[1:2] == ["launch"]:
        _launch(sys.argv[2:])
    elif sys.argv[1:2] == ["serve"]:
        _serve(*sys.argv[2:4])
    else:
        sys.exit("usage: kernel_zygote.py launch <kernel command> | serve <socket> <lock>")
