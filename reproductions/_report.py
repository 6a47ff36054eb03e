"""What every reproduction writes: a progress bar, ``DIR/NAME.md``, PNG figures, verdicts.

One place for the output conventions of :mod:`sklearn_fed.experiments`:

- :func:`progress` -- a tqdm bar on stderr, silenced by ``--no-progress``
  (:func:`add_progress_argument`) and by tqdm itself when stderr is not a
  terminal; a silent stand-in when tqdm is not installed (a bar is cosmetic).
- :func:`write_markdown` -- the table, with our numbers beside the paper's,
  as ``DIR/NAME.md``.
- :func:`new_figure` / :func:`save_figure` -- a :class:`matplotlib.figure.Figure`
  (no pyplot global state, so any backend and any thread works) saved as PNG.
- :func:`verdict` and :func:`equal_to_round_off` -- the words of a verdict
  cell ("reproduced" / "differs" with the measured gap) and the test behind
  every "equal to centralized" claim.
"""

import os
import sys
import time

import numpy as np

#: rtol of every "equal to centralized" claim (np.allclose, atol 0).
ROUND_OFF_RTOL = 1e-9


def add_progress_argument(parser):
    """Add ``--no-progress`` to an experiment's parser (once).

    Examples
    --------
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> add_progress_argument(parser)
    >>> parser.parse_args(["--no-progress"]).no_progress
    True
    """
    if not any("--no-progress" in action.option_strings for action in parser._actions):
        parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def progress_enabled(args):
    """Whether ``args`` (an argparse namespace) asks for a progress bar."""
    return not getattr(args, "no_progress", False)


class _SilentBar:
    """Stand-in with the part of tqdm's interface the experiments use."""

    def __init__(self, iterable=None):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable if self.iterable is not None else ())

    def update(self, n=1):
        pass

    def set_postfix_str(self, text):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def progress(iterable=None, *, total=None, desc=None, unit="it", enabled=True, file=None):
    """A progress bar on stderr (tqdm), or a silent one.

    Parameters
    ----------
    iterable : iterable, default=None
        Wrapped and yielded unchanged; or leave it out and call ``update``.
    total : int, default=None
        Number of steps (taken from ``len(iterable)`` when possible).
    desc : str, default=None
        Label shown before the bar.
    unit : str, default="it"
        Name of one step ("trial", "fit", "round").
    enabled : bool, default=True
        False (``--no-progress``) never draws. True draws only when ``file``
        is a terminal (tqdm's own rule), so logs and pipes stay clean.
    file : text stream, default=None
        Where to draw; ``sys.stderr`` at call time by default.

    Returns
    -------
    bar : tqdm.tqdm or silent stand-in
        Iterable, with ``update(n)``, ``close()`` and context-manager use.

    Examples
    --------
    >>> with progress(total=3, desc="trials", enabled=False) as bar:
    ...     for _ in range(3):
    ...         bar.update(1)
    >>> list(progress(range(3), enabled=False))
    [0, 1, 2]
    """
    if not enabled:
        return _SilentBar(iterable)
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional; the run itself does not need it
        return _SilentBar(iterable)
    return tqdm(iterable, total=total, desc=desc, unit=unit, file=file if file is not None else sys.stderr,
                disable=None, leave=False, dynamic_ncols=True)


def write_markdown(out, name, text):
    """Write ``text`` to ``out/name.md`` (creating ``out``); return the path.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = write_markdown(tmp, "oneshot-table2", "| a |")
    ...     pathlib.Path(path).read_text()
    '| a |\\n'
    """
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"{name}.md")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text.rstrip("\n") + "\n")
    return path


def new_figure(figsize=(6.0, 4.0)):
    """A :class:`matplotlib.figure.Figure` with constrained layout (no pyplot).

    Raises
    ------
    ImportError
        When matplotlib is missing, naming the ``plot`` extra.

    Examples
    --------
    >>> fig = new_figure((3, 2))
    >>> ax = fig.add_subplot()
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            "The reproductions draw their figures with matplotlib, which is not "
            "installed: pip install 'sklearn-fed[plot]'"
        ) from exc
    return Figure(figsize=figsize, layout="constrained")


def save_figure(fig, out, filename, dpi=100):
    """Save ``fig`` as ``out/filename`` (PNG; creating ``out``); return the path.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> fig = new_figure((3, 2))
    >>> _ = fig.add_subplot().plot([0, 1], [1, 0])
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     pathlib.Path(save_figure(fig, tmp, "line.png")).read_bytes()[:4]
    b'\\x89PNG'
    """
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, filename)
    fig.savefig(path, dpi=dpi)
    return path


def publish(args, name, text, figure, *, started=None):
    """Print a reproduction's ``text`` (and its run time since ``started``); with
    ``--out``, also write it and the figure ``figure()`` there. Returns 0 (exit status).

    Examples
    --------
    >>> import argparse
    >>> publish(argparse.Namespace(out=None), "demo", "Table 0", figure=None)
    Table 0
    0
    """
    print(text)
    if started is not None:
        print(f"\n({time.perf_counter() - started:.1f} s)")
    if args.out:
        write_markdown(args.out, name, text)
        save_figure(figure(), args.out, f"{name}.png")
    return 0


def format_gap(ours, paper):
    """Relative gap of ``ours`` to ``paper``: ``+3.0%``, or ``x1.2e+04`` when huge.

    Examples
    --------
    >>> format_gap(0.0103, 0.0100), format_gap(150.0, 0.01)
    ('+3.0%', 'x1.5e+04')
    """
    gap = (ours - paper) / abs(paper)
    if abs(gap) < 10:
        return f"{gap:+.1%}"
    return f"x{ours / paper:.2g}"


def verdict(ours, paper, rtol):
    """``reproduced (gap)`` when ``|ours - paper| <= rtol |paper|``, else ``differs (gap)``.

    Examples
    --------
    >>> verdict(0.0103, 0.0100, 0.05), verdict(0.0116, 0.0100, 0.05)
    ('reproduced (+3.0%)', 'differs (+16.0%)')
    """
    word = "reproduced" if abs(ours - paper) <= rtol * abs(paper) else "differs"
    return f"{word} ({format_gap(ours, paper)})"


def equal_to_round_off(a, b):
    """True when ``a`` and ``b`` agree to round-off (``np.allclose``, rtol 1e-9, atol 0).

    Examples
    --------
    >>> equal_to_round_off([0.01, 0.02], [0.01 * (1 + 1e-12), 0.02])
    True
    >>> equal_to_round_off(0.0100, 0.0101)
    False
    """
    return bool(np.allclose(a, b, rtol=ROUND_OFF_RTOL, atol=0.0))
