"""The first screen of a Markdown page as a reader sees it on GitHub: the page rendered as
GitHub-flavoured Markdown (markdown-it-py's GFM-like preset: tables, strikethrough,
autolinks) in GitHub's layout (its font stack, 16 px text, a 1012 px column, its heading
rules and table borders), then a headless Chromium screenshot of the top of it.

    python workflow/scripts/screenshot_page.py docs/results.md results-first-screen.png
    python workflow/scripts/screenshot_page.py docs/results.md out.png --size 1500,1000

Needs markdown-it-py with linkify (``pip install "markdown-it-py[linkify]"``) and a Chromium on PATH; images are
left out (GitHub shows them where they lie; the first screen is text). A check of how a
page reads, not part of the pipeline.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: GitHub's Markdown look, the parts a results page uses (github-markdown-css, light theme)
CSS = """
body { margin: 0; background: #fff; }
.markdown-body { box-sizing: border-box; max-width: 1012px; margin: 0 auto; padding: 32px;
  font-family: -apple-system, BlinkMacSystemFont, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif;
  font-size: 16px; line-height: 1.5; color: #1f2328; word-wrap: break-word; }
.markdown-body h1 { font-size: 2em; font-weight: 600; padding-bottom: .3em; border-bottom: 1px solid #d1d9e0b3;
  margin: 0 0 16px; }
.markdown-body h2 { font-size: 1.5em; font-weight: 600; padding-bottom: .3em; border-bottom: 1px solid #d1d9e0b3;
  margin: 24px 0 16px; }
.markdown-body h3 { font-size: 1.25em; font-weight: 600; margin: 24px 0 16px; }
.markdown-body p { margin: 0 0 16px; }
.markdown-body a { color: #0969da; text-decoration: none; }
.markdown-body code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 85%;
  padding: .2em .4em; background: #818b981f; border-radius: 6px; }
.markdown-body table { border-spacing: 0; border-collapse: collapse; display: block; width: max-content;
  max-width: 100%; overflow: auto; margin: 0 0 16px; }
.markdown-body th, .markdown-body td { padding: 6px 13px; border: 1px solid #d1d9e0; }
.markdown-body th { font-weight: 600; }
.markdown-body tr { background: #fff; border-top: 1px solid #d1d9e0b3; }
.markdown-body tr:nth-child(2n) { background: #f6f8fa; }
.markdown-body img { display: none; }
"""


def render(markdown: str) -> str:
    """The page as an HTML document in GitHub's layout."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("gfm-like").render(markdown)
    return f'<!doctype html><html><head><meta charset="utf-8"><style>{CSS}</style></head>' + (
        f'<body><article class="markdown-body">{body}</article></body></html>'
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("out", type=Path, help="the screenshot (PNG)")
    parser.add_argument("--size", default="1500,1000", help="window width,height in px")
    parser.add_argument("--browser", default="chromium")
    args = parser.parse_args(argv)
    browser = shutil.which(args.browser)
    if browser is None:
        print(f"no {args.browser} on PATH", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "page.html"
        html.write_text(render(args.page.read_text()), encoding="utf-8")
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--window-size={args.size}", f"--screenshot={args.out.resolve()}", html.as_uri()],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
