"""The README's CPU demo: run its first command's sweep for real and quote what it printed.

    python scripts/readme_demo.py            # ~1-2 minutes on 2 CPU cores

Runs `autotune sweep` (the default spec, a fresh study in a temporary folder, output piped as
into a log) and writes:
- `docs/default_sweep.txt`: when, at which commit, on which machine, then the output verbatim;
- the README's block between `<!-- default-sweep:begin -->` and `<!-- default-sweep:end -->`:
  the same output (tests/test_examples.py checks that the two agree);
- `docs/pareto.png`, `docs/throughput.png`, `docs/memory.png`: that study's report plots, and
  `docs/report.png`, its HTML page, where Chromium is installed (scripts/screenshots.py).
Run by hand when the sweep's output changes; not part of the test suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import context_lines, run_context  # noqa: E402
from screenshots import find_chromium  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LOG = REPO / "docs" / "default_sweep.txt"
README = REPO / "README.md"
BEGIN, END = "<!-- default-sweep:begin -->", "<!-- default-sweep:end -->"
PLOTS = ("pareto.png", "throughput.png", "memory.png")
# The header's last line; the sweep's output follows it.
OUTPUT_MARK = "Output of `autotune sweep`:"


def readme_block(output: str) -> str:
    """The README's quoted block for this output."""
    return f"{BEGIN}\n```\n{output.rstrip()}\n```\n{END}"


def quoted_output(readme_text: str) -> str | None:
    """The sweep output the README quotes between the markers (None: no markers)."""
    if BEGIN not in readme_text or END not in readme_text:
        return None
    block = readme_text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    return block.removeprefix("```").removesuffix("```").strip("\n")


def logged_output(log_text: str) -> str:
    """The sweep output in docs/default_sweep.txt (after its header)."""
    return log_text.split(OUTPUT_MARK + "\n", 1)[1].rstrip("\n")


def main() -> int:
    if quoted_output(README.read_text()) is None:  # before anything is run or written
        print(f"README.md has no {BEGIN} ... {END} block: add one where the demo goes", file=sys.stderr)
        return 2
    ctx = run_context()
    autotune = Path(sys.executable).with_name("autotune")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_") and k != "COLUMNS"}
    with tempfile.TemporaryDirectory(prefix="readme_demo_") as tmp:
        p = subprocess.run([str(autotune), "sweep"], cwd=tmp, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            print(p.stdout + p.stderr, file=sys.stderr)
            return p.returncode
        out = Path(tmp) / "report"
        r = subprocess.run([str(autotune), "report", "--out", str(out)], cwd=tmp, env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout + r.stderr, file=sys.stderr)
            return r.returncode
        for name in PLOTS:
            shutil.copyfile(out / name, REPO / "docs" / name)
        # The HTML page's picture from the same study, where Chromium is installed.
        if find_chromium():
            subprocess.run([sys.executable, str(REPO / "scripts" / "screenshots.py"), "--storage",
                            f"sqlite:///{Path(tmp) / 'autotune.db'}", "--out", str(REPO / "docs")],
                           cwd=tmp, env=env, check=True)
        else:
            print("docs/report.png not rewritten: no Chromium (apt-get install chromium)", file=sys.stderr)
    output = p.stdout.rstrip("\n")
    LOG.write_text("\n".join(["# The README's default sweep (scripts/readme_demo.py)", "",
                              *context_lines(ctx), "", OUTPUT_MARK, output, ""]))
    text = README.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    README.write_text(text[:start] + readme_block(output) + text[end:])
    print(f"wrote {LOG.relative_to(REPO)}, the README's block and docs/{', docs/'.join(PLOTS)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
