"""Writes the TUI pictures of the docs (docs/img/tui-*.svg): the real `diag tui` app, its real
probes on a real SGLang release, driven headless by Textual's pilot and exported as SVG.

Usage: .venv/bin/python scripts/docs-screenshot.py [--sglang 0.5.17] [--out docs/img]
(the release is downloaded once into ~/.cache/diag; a run takes ~10-30 s).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from diag.tui.app import make_app
from diag.tui.backend import Backend

SIZE = (120, 34)
TABS = {"overview": "1", "fixes": "2"}  # name -> the key that shows the tab


async def shoot(args: argparse.Namespace) -> list[Path]:
    # discover=False: the picture shows the target, not whatever engine runs on this machine
    backend = Backend(sglang=args.sglang, platform="hip", discover=False,
                      config={"attention_backend": args.attention_backend,
                              "speculative_num_steps": args.steps})
    app = make_app(backend=backend)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    async with app.run_test(size=SIZE) as pilot:
        deadline = time.monotonic() + args.timeout
        while not app.probes_done:
            if time.monotonic() > deadline:
                raise SystemExit(f"probes not done after {args.timeout} s")
            await pilot.pause(0.2)
        await pilot.pause(1.0)  # let the fixes' applicability land too
        for name, key in TABS.items():
            await pilot.press(key)
            await pilot.pause(0.5)
            path = out / f"tui-{name}.svg"
            path.write_text(app.export_screenshot(title=f"diag tui ({name})"))
            written.append(path)
        await pilot.press("q")
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sglang", default="0.5.17")
    ap.add_argument("--attention-backend", default="dsv4")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default="docs/img")
    ap.add_argument("--timeout", type=float, default=180.0)
    for path in asyncio.run(shoot(ap.parse_args())):
        print(path)


if __name__ == "__main__":
    main()
