"""The command line of a generated doc page (scripts/spec_reference.py, scripts/cli_reference.py):
write it, or with --check exit 1 when the committed page differs from what the code says now.

    sys.exit(doc_page.main(DOC, render, __doc__, "scripts/spec_reference.py"))
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable


def main(doc: Path, render: Callable[[], str], description: str, script: str,
         argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=description.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed page differs")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not doc.is_file() or doc.read_text() != text:
            print(f"{doc} is stale. To fix: python {script}", file=sys.stderr)
            return 1
        return 0
    doc.write_text(text)
    print(f"wrote {doc}")
    return 0
