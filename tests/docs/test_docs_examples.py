"""The code blocks of the documentation pages that promise runnable examples run as written.

Each ``.. code-block:: python`` block of the pages below runs in a fresh
interpreter in the repository root, with a time limit, and must not warn.
"""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["docs/deploying.rst", "docs/user_guide/pipelines.rst", "docs/developers.rst",
         "docs/user_guide/evaluation.rst", "docs/disclosure.rst"]
TIME_LIMIT = 180


def _blocks(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    pattern = r"^\.\. code-block:: python\n\n((?:(?:    .*)?\n)+)"
    return [textwrap.dedent(block) for block in re.findall(pattern, text, flags=re.MULTILINE)]


CASES = [(page, i, code) for page in PAGES for i, code in enumerate(_blocks(page))]


def test_every_page_has_examples():
    for page in PAGES:
        assert len(_blocks(page)) >= 3, page


@pytest.mark.parametrize("page, index, code", CASES,
                         ids=[f"{page}-block{i}" for page, i, _ in CASES])
def test_code_block_runs(page, index, code):
    result = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT,
                            capture_output=True,
                            text=True, timeout=TIME_LIMIT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == "", f"the block warns:\n{result.stderr[-3000:]}"
