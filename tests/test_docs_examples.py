"""Every ```python block of README.md and docs/ runs: examples that cannot rot.

Each block runs on its own, in a fresh namespace, from the repository root (as a reader would
paste it). A block that is a fragment on purpose (multi-host code, one that needs the real
traces or torch) has the line ``<!-- no-run -->`` directly above its fence; such blocks are
counted, so a page cannot opt out by accident of the fence language.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.MULTILINE | re.DOTALL)
NO_RUN = "<!-- no-run -->"


def python_blocks(path: Path) -> list:
    """[(line of the fence, code, runs)] of every ```python block of a Markdown file."""
    text = path.read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        if match["lang"] not in ("python", "py"):
            continue
        line = text.count("\n", 0, match.start()) + 1
        before = text[:match.start()].rstrip().rsplit("\n", 1)[-1].strip()
        indent = match["indent"]
        code = "\n".join(l[len(indent):] if l.startswith(indent) else l for l in match["body"].splitlines())
        blocks.append((line, code, before != NO_RUN))
    return blocks


BLOCKS = [(path, line, code) for path in PAGES for line, code, runs in python_blocks(path) if runs]


def test_the_fence_parser_finds_blocks_and_their_no_run_mark(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```python\nx = 1\n```\n\n<!-- no-run -->\n```python\nimport torch\n```\n\n"
                    "```bash\nls\n```\n\n- item:\n\n    ```python\n    y = 2\n    ```\n")
    assert python_blocks(page) == [(3, "x = 1", True), (8, "import torch", False), (18, "y = 2", True)]


def test_readme_and_docs_hold_runnable_examples():
    assert any(path.name == "README.md" for path, _, _ in BLOCKS)


@pytest.mark.parametrize("path,line,code", BLOCKS,
                         ids=[f"{p.relative_to(ROOT)}:{line}" for p, line, _ in BLOCKS])
def test_python_block_runs(path, line, code, monkeypatch):
    monkeypatch.chdir(ROOT)
    namespace = {"__name__": f"docs_example_{path.stem}_{line}"}
    exec(compile(code, f"{path.relative_to(ROOT)}:{line}", "exec"), namespace)  # noqa: S102
