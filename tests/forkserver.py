"""A fork server for the tests' script runs: `python SCRIPT ARGS` (or `python -c CODE ARGS`) started as a fork of a
process that has already made the script's imports, instead of a new interpreter that makes them again (torch,
tensordict, JAX, envpool, gymnasium: about 3 to 5 CPU seconds a run, most of a short run's cost). helpers.py's
launchers use it through `popen`, a subprocess.Popen; LEANRL_TEST_FORK_SERVER=0 starts every run as a subprocess.

What a forked run sees is what a new interpreter started by subprocess sees:
- its environment: the one its server was started with (helpers.ENV: CUDA hidden, the thread counts, XLA_FLAGS, set
  before the imports, as for a subprocess), plus what the script's own imports added to it;
- its modules: a server imports exactly the leading import statements of the run's sources (the script; for
  `-c CODE`, the code's, then the script's), in their order: the modules a new interpreter would have imported by
  then, no others, and each import's side effects. Sources that import the same packages (Python's own aside),
  first in the same order, share a server (torch, for one, imports torch.nn, torch.optim, torch.distributions and
  torch.distributed itself). What the imports printed (on fds 1 and 2) is replayed at the start of the run's own;
- its process: a child of the test process (which is made the subreaper of its orphaned descendants: the server
  forks twice, and the middle process exits at once), so subprocess.Popen's pid, wait, poll, returncode, signals
  and timeouts are the real ones, and its CPU time counts in the test process's RUSAGE_CHILDREN;
- its streams: the pipes or files that subprocess made (or the test process's own, where subprocess would leave
  them), as fds 0, 1 and 2; its cwd; sys.argv, sys.path[0] and a new __main__ as `python` sets them; SIGINT's
  disposition that of the server's start (a new interpreter's); an uncaught exception printed as Python prints it,
  the server's frames left out, and Python's own exit (code 1; a KeyboardInterrupt: killed by SIGINT).
Fork-safety: a server forks only while it has a single thread, and it runs nothing after its imports (no torch op,
no JAX backend, no environment): numpy's OpenBLAS pool, the only thread the imports start, shuts itself down at a
fork (pthread_atfork), and the server forks once after its imports to let it. A server that cannot import its
sources, or still has a thread, says so; its runs are then started as subprocesses, which import and fail as the
script would.
What differs: Python's hash seed (str and bytes hashes) is the server's, the same for every run it forks, where
each new interpreter draws its own; and `ps` shows a run with its server's command line.
"""

import ast
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import warnings

ENABLED = os.environ.get("LEANRL_TEST_FORK_SERVER", "1") != "0" and sys.platform == "linux"


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


# --- the server's side (this file run as `python forkserver.py CONTROL_FD`, its sources on the first message)

def serve(control: socket.socket):
    """Import the sources' leading statements, then fork a run for each request; returns in a run only."""
    setup = json.loads(control.recv(1 << 20))
    sigint = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the terminal ends the runs and pytest, not the server
    sys.path[0] = setup["path0"]
    printed, why = preload(setup["imports"])
    if why is None and threads() > 1:  # libraries with fork handlers (OpenBLAS) stop their threads at a fork
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        if threads() > 1:
            why = f"{threads()} threads after the imports: a fork would copy one thread of them"
    control.send(json.dumps({"ready": why is None, "why": why}).encode())
    if why is not None:
        os._exit(0)
    while True:
        message, fds, _, _ = socket.recv_fds(control, 1 << 20, 3)
        if not message:  # the test process closed its end
            os._exit(0)
        request, child = json.loads(message), None
        if threads() == 1:
            r, w = os.pipe()
            go_r, go_w = os.pipe()  # the run waits for its adoption: it starts as the test process's child
            middle = os.fork()
            if middle == 0:  # forks the run and exits: the run, orphaned, is adopted by the test process (a subreaper)
                try:
                    child = os.fork()
                except BaseException:
                    os._exit(1)
                if child == 0:
                    for fd in (r, w, go_w):
                        os.close(fd)
                    control.close()
                    os.read(go_r, 1)
                    os.close(go_r)
                    return request, fds, sigint, printed
                try:
                    os.write(w, str(child).encode())
                finally:
                    os._exit(0)
            os.close(w)
            os.close(go_r)
            child = int(os.read(r, 32) or 0)
            os.close(r)
            os.waitpid(middle, 0)  # once it is reaped, the run is the test process's child
            os.write(go_w, b"x")
            os.close(go_w)
        for fd in fds:
            os.close(fd)
        control.send(json.dumps({"pid": child} if child else {"why": f"not forked ({threads()} threads)"}).encode())


def preload(sources: list[list]) -> tuple[tuple[bytes, bytes], str | None]:
    """Run each source's leading import statements, what is printed meanwhile on fds 1 and 2 kept."""
    import tempfile

    saved, kept = (os.dup(1), os.dup(2)), (tempfile.TemporaryFile(), tempfile.TemporaryFile())
    os.dup2(kept[0].fileno(), 1)
    os.dup2(kept[1].fileno(), 2)
    why = None
    try:
        namespace = {"__name__": "__preload__"}
        for statements, filename in sources:
            exec(compile(statements, filename, "exec"), namespace)
    except BaseException as e:  # the run will fail the same way: it is started as a subprocess, and shows it
        why = f"the imports failed: {type(e).__name__}: {e}"
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, target in zip(saved, (1, 2)):
            os.dup2(fd, target)
            os.close(fd)
    printed = []
    for f in kept:
        f.seek(0)
        printed.append(f.read())
        f.close()
    return (printed[0], printed[1]), why


def become(request: dict, fds: list[int], sigint, printed: tuple[bytes, bytes]) -> None:
    """In the forked run: become `python ARGV` in CWD, then run its code as __main__."""
    import builtins
    import importlib.machinery
    import types

    for fd, target in zip(fds, (0, 1, 2)):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    signal.signal(signal.SIGINT, sigint)
    for fd, data in zip((1, 2), printed):
        while data:
            data = data[os.write(fd, data):]
    argv = request["argv"]
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    if argv[0] == "-c":
        code, sys.argv, sys.path[0] = compile(argv[1], "<string>", "exec"), ["-c", *argv[2:]], ""
        main.__loader__ = importlib.machinery.BuiltinImporter
    else:
        path = argv[0]
        try:
            with open(path, "rb") as f:
                source = f.read()
        except OSError as e:
            print(f"{sys.executable}: can't open file {os.path.abspath(path)!r}: [Errno {e.errno}] {e.strerror}",
                  file=sys.stderr)
            os._exit(2)
        code, sys.argv, sys.path[0] = compile(source, path, "exec"), list(argv), os.path.dirname(os.path.abspath(path))
        main.__file__, main.__cached__ = path, None
        main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    sys.modules["__main__"] = main
    hook = sys.excepthook

    def uncaught(kind, value, tb):  # as Python prints it: the traceback from the run's own first frame
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        if isinstance(value, BaseException):
            value.__traceback__ = tb  # what Python's hook prints
        hook(kind, value, tb)

    sys.excepthook = uncaught
    exec(code, main.__dict__)


# --- the test process's side

def leading_imports(source: str, filename: str) -> list[str]:
    """The import statements a source starts with (after its docstring), as source text."""
    statements = []
    for node in ast.parse(source, filename).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and not statements:
            continue  # the docstring
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            break
        if not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            statements.append(ast.get_source_segment(source, node))
    return statements


def third_party(statement: str) -> list[str]:
    """The packages, not Python's own, that an import statement imports (`torch` for `import torch.nn as nn`)."""
    node = ast.parse(statement).body[0]
    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    return [n.split(".")[0] for n in names if n.split(".")[0] not in sys.stdlib_module_names]


class Server:
    """One server process: started with `env`, importing `imports` ([statements, filename] per source)."""

    def __init__(self, env: dict, imports: list[list], path0: str, log):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.control, self.lock = ours, threading.Lock()
        self.proc = subprocess.Popen([sys.executable, __file__, str(theirs.fileno())], env=env,
                                     cwd=os.path.dirname(log.name), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=log, pass_fds=[theirs.fileno()])
        theirs.close()
        self.owner = os.getpid()  # a process forked from this one (a test's) starts its runs as subprocesses
        ours.send(json.dumps({"imports": imports, "path0": path0}).encode())
        ours.settimeout(600)
        try:
            answer = ours.recv(1 << 16)
        except TimeoutError:
            answer = json.dumps({"ready": False, "why": "its imports took more than 600 s"}).encode()
        ours.settimeout(None)
        ready = json.loads(answer) if answer else {"ready": False, "why": f"it exited: {log_tail(log)}"}
        self.ready, self.why, self.log = ready["ready"], ready["why"], log
        if not self.ready:
            self.close()

    def start(self, argv: list[str], cwd: str, fds: list[int]) -> int | None:
        """The pid of the run forked for `python ARGV` in CWD with FDS as its 0, 1, 2; None if none was."""
        with self.lock:
            if not self.ready:
                return None
            try:
                socket.send_fds(self.control, [json.dumps({"argv": argv, "cwd": cwd}).encode()], fds)
                self.control.settimeout(120)  # a fork and the middle process's exit: milliseconds
                answer = self.control.recv(1 << 16)
                self.control.settimeout(None)
            except BaseException as e:  # a server gone or stuck, or a test's time limit in the middle of the
                self.ready = False  # exchange: a late reply would be read as the next run's, so the server is done
                self.close()
                if isinstance(e, OSError):
                    return None
                raise
        if not answer:  # the server exited
            self.ready = False
            self.close()
            return None
        return json.loads(answer).get("pid")

    def close(self) -> None:
        self.control.close()  # the server exits when it reads the end of its socket
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(os.path.dirname(self.log.name), ignore_errors=True)


def log_tail(log) -> str:
    log.flush()
    with open(log.name, errors="replace") as f:
        return f.read()[-2000:]


_servers: dict[tuple, Server] = {}
forked: list[int] = []  # the pids of the runs forked by this process's servers
_subreaper = []
_starting = threading.Lock()


def server_for(env: dict, sources: list[str]) -> Server | None:
    """The server for runs of these sources (scripts' paths, or -c code) in `env`, started at the first such run."""
    with _starting:
        return _server_for(env, sources)


def _server_for(env: dict, sources: list[str]) -> Server | None:
    import tempfile

    imports, key = [], []
    for source in sources:
        if source.endswith(".py"):
            with open(source) as f:
                text, filename = f.read(), source
        else:
            text, filename = source, "<string>"
        statements = leading_imports(text, filename)
        imports.append(["\n".join(statements), filename])
        for package in (p for statement in statements for p in third_party(statement)):
            key += [package] if package not in key else []
    path0 = os.path.dirname(os.path.abspath(sources[0])) if sources[0].endswith(".py") else ""
    key = (tuple(sorted(env.items())), path0, tuple(key))
    if key not in _servers:
        if not _subreaper:
            import ctypes

            PR_SET_CHILD_SUBREAPER = 36
            if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
            _subreaper.append(True)
            import atexit

            atexit.register(close_all)
        folder = tempfile.mkdtemp(prefix="leanrl-forkserver-")
        log = open(os.path.join(folder, "server.log"), "w+")
        _servers[key] = Server(env, imports, path0, log)
        if not _servers[key].ready:
            warnings.warn(f"the fork server for {sources} is not used: {_servers[key].why}", stacklevel=3)
    server = _servers[key]
    return server if server.ready and server.owner == os.getpid() else None


def close_all() -> None:
    while _servers:
        _servers.popitem()[1].close()


class ForkedPopen(subprocess.Popen):
    """subprocess.Popen of `[sys.executable, *ARGS]`, its process forked by a server: subprocess makes the pipes
    and reads them, waits for the run, signals it, as for its own child (which it is: see the module's docstring).

    A private method is overridden here, on purpose: subprocess has no public way to give a Popen (its pipes,
    `communicate`, `wait`, timeouts) a process that it did not start itself, and `_execute_child` is where Popen
    starts its child, after making the pipes. tests/test_runs.py holds the private names this leans on (the
    method's parameters, `_close_pipe_fds`, `_child_created`) to CPython's, so that a change there fails a test,
    not a run."""

    def __init__(self, server: Server, args, **kwargs):
        self._server = server
        super().__init__(args, **kwargs)

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags,
                       shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, *rest):
        fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1, errwrite if errwrite != -1 else 2]
        pid = self._server.start(list(args[1:]), os.path.abspath(cwd or os.getcwd()), fds)
        if pid is None:
            raise ChildProcessError("the fork server did not start the run")
        self.pid, self._child_created = pid, True
        forked.append(pid)
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)


def popen(args: list[str], *, env: dict, imports_of: list[str] | None = None, **kwargs) -> subprocess.Popen:
    """subprocess.Popen(args, env=env, **kwargs) for `args` = [sys.executable, SCRIPT or -c CODE, ...]: a forked run
    where a server can start it, a subprocess otherwise. `imports_of`: the sources whose leading imports the run makes
    first (by default the script, or the code)."""
    args, cwd = list(args), kwargs.get("cwd")
    if (ENABLED and len(args) > 1 and args[0] == sys.executable and (args[1].endswith(".py") or args[1] == "-c")
            and not kwargs.get("preexec_fn") and not kwargs.get("start_new_session")
            and (cwd is None or os.path.isdir(cwd))):
        sources = imports_of or ([args[2]] if args[1] == "-c" else [args[1]])
        server = server_for(env, sources)
        if server is not None:
            try:
                return ForkedPopen(server, args, env=env, **kwargs)
            except ChildProcessError:
                pass
    return subprocess.Popen(args, env=env, **kwargs)


def run(args: list[str], *, env: dict, timeout: float | None = None, imports_of: list[str] | None = None,
        **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(args, env=env, timeout=timeout, capture_output=..., text=...) through `popen`."""
    if kwargs.pop("capture_output", False):
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with popen(args, env=env, imports_of=imports_of, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            process.kill()
            exc.stdout, exc.stderr = process.communicate()
            raise
        except BaseException:
            process.kill()
            raise
    return subprocess.CompletedProcess(process.args, process.poll(), stdout, stderr)


if __name__ == "__main__":
    _control = socket.socket(fileno=int(sys.argv[1]))
    become(*serve(_control))
