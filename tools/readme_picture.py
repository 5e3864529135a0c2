"""Publish the README's picture of the workbook at work: ``make readme-picture``.

The browser test of notebook 06's explorer (``tests/test_browser.py``) moves its kernel-size
slider in a real JupyterLab and saves a screenshot of the page, with the device that measured
the charts and the date, as ``build/browser/readme_explorer.png`` and ``.json``. This copies both
into ``docs/`` and rewrites the README's caption from the ``.json``, between its two
``readme-picture`` marker comments.

Usage: ``python -m tools.readme_picture [--source build/browser]``
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil

__all__ = ["PICTURE", "META", "START", "END", "KEYS", "caption", "with_caption", "publish", "main"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
NAME = "readme_explorer"
#: Where the published picture and its facts live, and the README that shows them.
PICTURE = ROOT / "docs" / f"{NAME}.png"
META = ROOT / "docs" / f"{NAME}.json"
README = ROOT / "README.md"
#: The marker comments around the picture and its caption in the README.
START = "<!-- readme-picture: written by `make readme-picture` -->"
END = "<!-- /readme-picture -->"
#: The facts the caption states, as the browser test writes them (device, layers and counts
#: read from the page).
KEYS = ("device", "date", "notebook", "layer_before", "layer_after", "measured", "seconds",
        "busy_processes")


def caption(meta: dict) -> str:
    """The README's image and caption, from the screenshot's facts.

    Raises:
        KeyError: naming the first of :data:`KEYS` that ``meta`` lacks.
    """
    missing = [k for k in KEYS if k not in meta]
    if missing:
        raise KeyError(f"meta: the screenshot's facts lack {missing[0]!r}")
    alt = "Notebook 06's convolution explorer in JupyterLab: sliders, runtime and memory charts"
    return (f"![{alt}](docs/{NAME}.png)\n\n"
            f"*The convolution explorer of `{meta['notebook']}` in JupyterLab, just after the "
            f"kernel-size slider moved the layer (b, i, f, k, s) from {meta['layer_before']} to "
            f"{meta['layer_after']}: {meta['measured']} ticked strategies re-measured in "
            f"{meta['seconds']:g} s, runtime above and memory below. Measured live on "
            f"{meta['device']}{_busy(meta['busy_processes'])}, {meta['date']}.*")


def _busy(processes: int) -> str:
    """How loaded the machine was while the picture's times were measured."""
    if not processes:
        return ""
    return (f" while {processes} other CPU-bound process{'es' if processes > 1 else ''} kept "
            "its cores busy")


def with_caption(readme: str, meta: dict) -> str:
    """``readme`` with the text between :data:`START` and :data:`END` replaced by
    :func:`caption` of ``meta``.

    Raises:
        ValueError: if the README lacks either marker, or has them out of order.
    """
    start, end = readme.find(START), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"readme: needs the lines {START!r} and then {END!r}")
    return readme[:start + len(START)] + "\n" + caption(meta) + "\n" + readme[end:]


def publish(source: pathlib.Path, picture: pathlib.Path = PICTURE, meta: pathlib.Path = META,
            readme: pathlib.Path = README) -> dict:
    """Copy ``source/readme_explorer.{png,json}`` to ``picture`` and ``meta``; rewrite the
    caption in ``readme``. Returns the facts.

    Raises:
        FileNotFoundError: if the screenshot or its facts are not in ``source`` (checked before
            anything is written).
    """
    png, facts = source / f"{NAME}.png", source / f"{NAME}.json"
    for path in (png, facts):
        if not path.is_file():
            raise FileNotFoundError(
                f"source: no {path}; the browser test of notebook 06's explorer writes it")
    data = json.loads(facts.read_text(encoding="utf-8"))
    text = with_caption(readme.read_text(encoding="utf-8"), data)  # raises before any write
    picture.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(png, picture)
    meta.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    readme.write_text(text, encoding="utf-8")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.readme_picture",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=pathlib.Path, default=ROOT / "build" / "browser")
    args = parser.parse_args(argv)
    data = publish(args.source)
    print(f"{PICTURE.relative_to(ROOT)}: measured on {data['device']}, {data['date']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
