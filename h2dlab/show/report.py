"""The rendered report: ``build()`` executes the notebooks into HTML, ``workbook()``
writes the tables behind them to one Excel file."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path

from h2dlab.errors import UsageError
from h2dlab.recording import datasets, session
from h2dlab.recording.session import ROOT, resolve_mode

__all__ = ["KERNELSPEC", "NOTEBOOKS", "REPORTED", "RETINA", "TIMING", "build", "workbook"]

NOTEBOOKS = [
    "01-forum-experiment-revisited",
    "02-fastest-way",
    "03-spikes-explained",
    "04-pinned-memory-primer",
    "05-explore",
    "06-your-trace",
    "07-fleet",
]
#: The notebooks rendered to reports/ (05 is interactive: it lives in JupyterLab).
REPORTED = NOTEBOOKS[:4]
#: The kernel the notebooks name in their metadata: the one README's `make install` registers.
KERNELSPEC = {"display_name": "h2dlab (Python)", "language": "python", "name": "h2dlab"}
#: ``build`` writes its wall times here, in ``outdir``: ``total_s`` (end to end, a live
#: recording included), ``record_s``, ``notebooks`` (name -> s), ``workbook_s``.
TIMING = "report-timing.json"
#: The kernels draw figures at twice their pixels (the inline backend's "retina" PNG: 2x the
#: dpi, shown at the same size through its width and height), sharp on the screens reports
#: are read on.
RETINA = "--InlineBackend.figure_formats=retina"


def _execute(client, km, env: dict) -> BaseException | None:
    """Run ``client.execute`` in a thread of its own and return what it raised (None if
    nothing). nbclient, run in the main thread, takes SIGINT and SIGTERM for itself: it
    swallows a Ctrl-C or fails on the kernel the signal reached, so ``h2dlab report`` ended
    in a traceback (hostile tester, session 29). Off the main thread it leaves them alone:
    they reach this thread, which shuts the kernel down and stops as interrupted."""
    box: dict[str, BaseException] = {}

    def work() -> None:
        try:
            client.execute(env=env, cleanup_kc=True)  # shut the kernel down here, not at exit
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["exc"] = exc

    worker = threading.Thread(target=work, name="h2dlab-notebook", daemon=True)
    try:  # start() too: a signal can land while it waits for the thread to begin
        worker.start()
        while worker.is_alive():
            worker.join(0.2)
    except KeyboardInterrupt:
        _stop_kernel(km)
        if worker.ident is not None:
            worker.join(10)
        raise
    return box.get("exc")


def _stop_kernel(km) -> None:
    """Shut a notebook's kernel down at once after an interruption (best effort)."""
    try:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    except Exception:  # noqa: BLE001 - already stopping; a kernel that will not die is the OS's
        pass


def build(
    outdir: str | Path = "reports",
    mode: str | None = None,
    notebooks: list[str] | None = None,
    inplace: bool = False,
    timeout: int = 600,
    data: str | Path | None = None,
) -> int:
    """Execute the notebooks and render ``reports/*.html`` plus an Excel workbook.

    Parameters
    ----------
    outdir
        Where the HTML pages and the workbook go.
    mode
        ``H2DLAB_MODE`` for the notebook kernels (default: this process's variable).
    notebooks
        Names from :data:`NOTEBOOKS` (default: :data:`REPORTED`).
    inplace
        Also write the executed notebooks back to ``notebooks/`` (how the committed
        outputs are refreshed).
    timeout
        Seconds a cell may run.
    data
        The recording the notebooks read (``H2DLAB_DATA`` for the kernels): ``"h200"``
        or a recording folder (default: this process's variable, else each notebook's
        ``DATA``). In live mode this machine's recording is found or made once, here,
        before any notebook runs, and every notebook reads that same folder.

    Returns
    -------
    int
        0, or 1 when a notebook failed (the error is shown in its HTML page).

    Its wall times, end to end, go to ``outdir/report-timing.json`` (:data:`TIMING`) and to
    one line on stderr. Each notebook's kernel is shut down before the next one starts.
    """
    import jupytext
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from h2dlab.show import report_index
    from h2dlab.show.report_html import render, title_of

    t_all = time.time()
    timing: dict = {"started": _now(), "record_s": None, "notebooks": {}, "workbook_s": None, "failed": None}
    # The kernels get their own environment; this process's stays as it was.
    # Figures must reach the notebook whatever backend the caller's environment names.
    kernel_env = {**os.environ, "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    if mode is not None:
        kernel_env["H2DLAB_MODE"] = mode
    # The notebooks replay unless H2DLAB_MODE says otherwise (their MODE is "replay"); live
    # without CUDA fails here, early, in one line.
    resolved = resolve_mode("auto", kernel_env) if kernel_env.get("H2DLAB_MODE") else "replay"
    inherited = data is None and bool(kernel_env.get("H2DLAB_DATA"))
    if inherited:  # inherited by the kernels: checked now too
        data = kernel_env["H2DLAB_DATA"]
    if data is not None:
        try:
            rec = session.Recorded(data if str(data) == session.BUNDLED else Path(data).resolve())
        except UsageError as exc:  # a variable the user may not know is set: name it
            raise UsageError(f"H2DLAB_DATA={data}: {exc}" if inherited else str(exc)) from None
        kernel_env["H2DLAB_DATA"] = rec.name if rec.bundled else str(rec.folder)
    if resolved == "live":  # record this machine once (or find its recording), then every notebook reads it
        t0 = time.time()
        rec = session.recording(kernel_env.get("H2DLAB_DATA", session.BUNDLED), "live", environ=kernel_env)
        kernel_env["H2DLAB_DATA"] = str(rec.folder)
        timing["record_s"] = round(time.time() - t0, 1) if rec.made_now else 0.0
    shown = kernel_env.get("H2DLAB_DATA", "each notebook's DATA")
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    names = notebooks or REPORTED
    timing.update(mode=resolved, data=shown)
    kernel = _kernel_name()
    pages: list[dict] = []  # for the front page, index.html
    data_read = kernel_env.get("H2DLAB_DATA", session.BUNDLED)
    for k, name in enumerate(names, 1):
        src = ROOT / "notebooks" / f"{name}.py"
        nb = jupytext.read(src)
        t0 = time.time()
        print(f"[{k}/{len(names)}] executing {name} ({resolved}, data: {shown}) ...", flush=True)
        km = _kernel_manager(kernel)
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name=kernel,
            km=km,
            resources={"metadata": {"path": str(ROOT / "notebooks")}},
            extra_arguments=[RETINA],
        )
        exc = _execute(client, km, kernel_env)
        failed = None
        if isinstance(exc, CellExecutionError):
            text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", str(exc)).strip()  # the kernel's colours
            failed = text.splitlines()[-1] if text else type(exc).__name__
        elif exc is not None:
            raise exc
        timing["notebooks"][name] = round(time.time() - t0, 1)
        if inplace:  # the metadata JupyterLab writes, so that opening a notebook changes nothing
            nb.metadata["jupytext"] = {  # no jupytext version in the .py: Lab would rewrite it
                "formats": "ipynb,py:percent",
                "notebook_metadata_filter": "-jupytext.text_representation",
            }
            nb.metadata["kernelspec"] = KERNELSPEC
            # atomically: a stop mid-write must not leave a committed notebook empty
            datasets.atomic_write(
                ROOT / "notebooks" / f"{name}.ipynb", lambda p, nb=nb: nbformat.write(nb, p)
            )
        html = render(nb, name)
        datasets.atomic_write(
            out / f"{name}.html", lambda p, html=html: Path(p).write_text(html, encoding="utf-8")
        )
        pages.append({"name": name, "title": title_of(nb, name), "failed": failed})
        if failed:
            report_index.write(out, pages, data_read, resolved)
            timing["failed"] = name
            _timing(out, timing, t_all)
            print(
                f"h2dlab: error: notebook {name} failed ({failed}); the error is shown in "
                f"{out / (name + '.html')}",
                file=sys.stderr,
            )
            return 1
        print(f"      wrote {out / (name + '.html')} in {time.time() - t0:.0f} s", flush=True)
    t0 = time.time()
    try:
        workbook(out / "h2dlab-tables.xlsx", data_read)
    except datasets.SchemaError as exc:  # a damaged table in the recording: its name, in one line
        raise UsageError(f"the workbook cannot read the recording's tables: {exc}") from None
    timing["workbook_s"] = round(time.time() - t0, 1)
    index = report_index.write(out, pages, data_read, resolved, workbook="h2dlab-tables.xlsx")
    print(f"wrote {out / 'h2dlab-tables.xlsx'} and {index}; all done in {time.time() - t_all:.0f} s")
    _timing(out, timing, t_all)
    return 0


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _timing(out: Path, timing: dict, t_all: float) -> None:
    """Write ``out/report-timing.json`` and say the total on stderr (what the wall-time
    figures in data/README.md quote)."""
    import json

    timing = {**timing, "finished": _now(), "total_s": round(time.time() - t_all, 1)}
    text = json.dumps(timing, indent=2) + "\n"
    datasets.atomic_write(out / TIMING, lambda p: Path(p).write_text(text))
    rec = f"recording this machine {timing['record_s']:.0f} s, " if timing["record_s"] else ""
    print(
        f"h2dlab report: {timing['total_s']:.0f} s end to end ({timing['mode']}; {rec}"
        f"notebooks {sum(timing['notebooks'].values()):.0f} s); times in {out / TIMING}",
        file=sys.stderr,
    )


def _kernel_name() -> str:
    # The kernel the notebooks name (make install registers it); python3 where it is missing.
    from jupyter_client.kernelspec import KernelSpecManager

    return KERNELSPEC["name"] if KERNELSPEC["name"] in KernelSpecManager().find_kernel_specs() else "python3"


def _kernel_manager(kernel: str = "python3"):
    # IPC (a local socket file) rather than TCP on localhost: nothing listens on a port,
    # and the kernel has no reason to warn "running over TCP without encryption".
    import atexit
    import shutil
    import tempfile

    from jupyter_client.manager import KernelManager

    if os.name != "posix":
        return KernelManager(kernel_name=kernel)
    # The socket path must be absolute: the kernel runs in notebooks/, this process elsewhere.
    folder = tempfile.mkdtemp(prefix="h2dlab-kernel-")
    atexit.register(shutil.rmtree, folder, True)
    return KernelManager(kernel_name=kernel, transport="ipc", ip=str(Path(folder) / "kernel"))


def workbook(path: str | Path, data: str | Path = session.BUNDLED) -> Path:
    """The tables behind the report, one sheet each, from the recording ``data``
    (``"h200"``, the bundled one, or a recording folder); kinds it lacks get no sheet.
    A README sheet comes first; see :mod:`h2dlab.show.workbook` for the layout."""
    from h2dlab.show.workbook import write

    return write(path, data)
