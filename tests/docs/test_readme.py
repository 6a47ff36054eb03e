"""Every code block of README.md runs as written, so the README cannot go stale.

Python blocks run one by one, each in a fresh interpreter started in the
repository root (a block must not lean on another's variables), with a time
limit, and must not warn. Shell blocks are checked without running them: ``make`` targets must
exist in the Makefile and ``python -m reproductions`` command lines must parse.
Relative links must point inside the repository.
"""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```$", README, flags=re.M | re.S)
PYTHON = [code for lang, code in BLOCKS if lang == "python"]
SHELL = [code for lang, code in BLOCKS if lang in ("bash", "sh", "console")]
# Seconds a block may take (a fresh interpreter importing torch takes a few).
TIME_LIMIT = 180


def test_readme_has_the_blocks_it_promises():
    assert len(PYTHON) >= 6 and SHELL
    assert all(lang in ("python", "bash", "text") for lang, _ in BLOCKS), "untested block kind"
    opening = README.split("\n## ")[0]
    assert "make demo" in opening and "make test" in opening


@pytest.mark.parametrize("code", PYTHON, ids=[f"block{i}" for i in range(len(PYTHON))])
def test_python_block_runs(code):
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == "", f"the block warns or prints to stderr:\n{result.stderr[-3000:]}"


def _shell_commands():
    for block in SHELL:
        for line in block.splitlines():
            command = line.split("#", 1)[0].strip()
            if command:
                yield shlex.split(command)


def test_shell_commands_exist():
    from reproductions.__main__ import build_parser

    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.M))
    parser = build_parser()
    for argv in _shell_commands():
        if argv[0] == "make":
            assert set(argv[1:]) <= targets, argv
        elif argv[:3] == ["python", "-m", "reproductions"]:
            if argv[3:] == ["--help"]:
                continue
            parser.parse_args(argv[3:])  # exits (fails the test) on an unknown name or option
        else:
            raise AssertionError(f"README command not checked by this test: {argv}")


def test_links_point_inside_the_repository():
    assert not re.search(r"`(\.\./|/work|/home|/tmp)", README), "a path outside the repository"
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if not re.match(r"\w+://", target):
            path = (ROOT / target).resolve()
            assert path.is_relative_to(ROOT) and path.exists(), target
    for path in re.findall(r"`((?:docs|examples|tests|benchmarks|reproductions)/[\w./-]+)`", README):
        assert "_build" in path or (ROOT / path).exists(), path  # _build: made by make docs


def test_make_demo_explains_every_column(capsys):
    import runpy

    runpy.run_path(str(ROOT / "examples" / "demo_diabetes.py"), run_name="__main__")
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("clients |"))
    columns = [c.strip() for c in header.split("|")]
    explained = {"clients", "uplink bytes", "FedAvg-200 uplink"}
    assert explained <= set(columns)
    for name in explained:
        assert f"\n{name}: " in out, f"the demo does not explain its column {name!r}"
    # the FedAvg column is 200 rounds x 11 values x 8 bytes per client
    first = next(line for line in out.splitlines() if line.strip().startswith("1 |"))
    assert first.split("|")[-1].strip() == f"{200 * 11 * 8:,}"
