"""The report's pictures in docs/: the HTML page as a headless browser shows it, and the PNG plots.

    python scripts/screenshots.py --study default --storage sqlite:///autotune.db --out docs/

Reads a study (e.g. the default sweep's: `autotune sweep` first), writes its report folder to a
temporary place, copies pareto.png, throughput.png and memory.png to OUT and screenshots
report.html with Chromium (Debian's `chromium`; headless, no sandbox, no network) to
OUT/report.png. Run by hand when the report changes; not part of the test suite.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--hide-scrollbars",
                  # plotly draws the figures in JavaScript after load: give it time to
                  "--virtual-time-budget=8000"]


def find_chromium() -> str | None:
    """The Chromium (or Chrome) on PATH, or None."""
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def chromium() -> str:
    path = find_chromium()
    if path is None:
        raise SystemExit("no Chromium found: apt-get install chromium")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default="default")
    ap.add_argument("--storage", default="sqlite:///autotune.db")
    ap.add_argument("--out", type=Path, default=Path("docs"))
    ap.add_argument("--width", type=int, default=1400, help="browser window width, pixels")
    ap.add_argument("--height", type=int, default=2000, help="browser window height, pixels")
    args = ap.parse_args()

    from autotune.report.build import collect
    from autotune.report.html import write_report_dir
    from autotune.search.study import open_study

    doc = collect(open_study(args.storage, args.study, create=False), storage_url=args.storage)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="autotune-screens-") as tmp:
        folder = Path(tmp) / "report"
        write_report_dir(doc, folder)
        for name in ("pareto.png", "throughput.png", "memory.png"):
            shutil.copy(folder / name, args.out / name)
        shot = args.out / "report.png"
        subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--window-size={args.width},{args.height}",
                        f"--screenshot={shot.resolve()}", (folder / "report.html").resolve().as_uri()],
                       check=True, capture_output=True, timeout=300, cwd=tmp)
    print(f"wrote {args.out}/report.png, pareto.png, throughput.png, memory.png")


if __name__ == "__main__":
    main()
