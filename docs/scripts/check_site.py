"""Open the built site in headless Chromium: screenshots, no raw TeX, no sideways overflow.

    make site-check                                   # builds the site first
    python docs/scripts/check_site.py --out site-check [--site site] [--width 1280]

For each page below, the script serves ``site/`` on a local port (nothing leaves the
machine), loads the page in Chromium (Debian: ``apt-get install chromium``) at 1280 px,
waits for MathJax, and measures in the page itself:

* raw TeX: every ``arithmatex`` element must have been typeset by MathJax, and no text
  outside code blocks may still read ``\\(``, ``\\[`` or ``$$``;
* overflow: the page must not scroll sideways, and no code block, table, figure or displayed
  formula of the main column may be wider than the column or scroll sideways itself.

It saves a full-page screenshot per page (``OUT/<name>.png``) and exits 1 listing every
failure. Not part of ``make test`` (CI has no browser); run it after changing the layout,
and look at the screenshots.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: name -> page (URL path below the site root)
PAGES = {
    "home": "",
    "syllabus": "syllabus/",
    "tutorial-02": "tutorials/02-failure-links/",
    "tutorial-04": "tutorials/04-lru-eviction/",
    "tutorial-06": "tutorials/06-draft-tree/",
    "explanation-speculative-decoding": "explanation/speculative-decoding/",
    "benchmarks": "benchmarks/",
}

#: Injected at the end of every HTML page served: once MathJax is done (or at once when the
#: page has no maths), measure and write the result as JSON into <pre id="site-check">.
PROBE = r"""
<script>
(function () {
  function text(el) { return (el.textContent || "").trim().replace(/\s+/g, " ").slice(0, 90); }
  function measure() {
    var out = {width: window.innerWidth, height: document.documentElement.scrollHeight,
               page_scroll_width: document.documentElement.scrollWidth, raw_tex: [], overflow: []};
    var main = document.querySelector(".md-content__inner") || document.body;
    var right = main.getBoundingClientRect().right + 1;
    document.querySelectorAll(".arithmatex").forEach(function (el) {
      if (!el.querySelector("mjx-container")) out.raw_tex.push(text(el));
    });
    var walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
    var node;
    while ((node = walker.nextNode())) {
      if (node.parentElement.closest("pre, code, script, style, mjx-container")) continue;
      if (/\\\(|\\\[|\$\$/.test(node.nodeValue)) out.raw_tex.push(node.nodeValue.trim().slice(0, 90));
    }
    if (out.page_scroll_width > out.width) {
      // What sticks out of the window: the deepest elements past its right edge.
      document.querySelectorAll("body *").forEach(function (el) {
        var box = el.getBoundingClientRect();
        if (box.right > out.width + 1 && box.width > 0 && out.overflow.length < 8 &&
            !Array.prototype.some.call(el.children, function (c) { return c.getBoundingClientRect().right > out.width + 1; })) {
          out.overflow.push({element: el.tagName.toLowerCase() + (el.className ? "." + String(el.className).split(" ")[0] : ""),
                             width: Math.round(box.width), scroll_width: el.scrollWidth, client_width: el.clientWidth,
                             column_right: out.width, right: Math.round(box.right), text: text(el)});
        }
      });
    }
    main.querySelectorAll("pre > code, .md-typeset__scrollwrap, table, img, mjx-container").forEach(function (el) {
      if (el.closest("mjx-assistive-mml")) return;  // MathJax's hidden copy for screen readers
      var box = el.getBoundingClientRect();
      // Only an element that can scroll (overflow-x auto or scroll) scrolls sideways; an
      // inline formula's subscripts poking out of its own box do not count.
      var ox = getComputedStyle(el).overflowX;
      var scrolls = (ox === "auto" || ox === "scroll") && el.scrollWidth > el.clientWidth + 1;
      // Material's scroll wrappers reach into the column's padding by design: only their
      // scrolling counts; anything else must stay inside the column.
      var past = !el.classList.contains("md-typeset__scrollwrap") && box.right > right;
      if (past || scrolls) {
        out.overflow.push({element: el.tagName.toLowerCase() + (el.className ? "." + String(el.className).split(" ")[0] : ""),
                           width: Math.round(box.width), scroll_width: el.scrollWidth,
                           client_width: el.clientWidth, column_right: Math.round(right),
                           right: Math.round(box.right), text: text(el)});
      }
    });
    out.column_width = Math.round(main.getBoundingClientRect().width);
    var pre = document.createElement("pre");
    pre.id = "site-check";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }
  window.addEventListener("load", function () {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(function () { setTimeout(measure, 200); });
    } else { setTimeout(measure, 200); }
  });
})();
</script>
"""


class Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the site; HTML pages get the probe when ``?probe`` is in the URL."""

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if query == "probe" and (path.endswith("/") or path.endswith(".html")):
            file = Path(self.translate_path(path))
            if file.is_dir():
                file = file / "index.html"
            html = file.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>")
            data = html.encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        super().do_GET()


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("check_site.py: no Chromium found (Debian: apt-get install chromium)")


def run_chromium(binary: str, args: list, profile: str) -> str:
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
           "--virtual-time-budget=15000", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        raise RuntimeError(f"chromium failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def check_page(binary: str, base: str, name: str, page: str, width: int, out: Path, profile: str) -> list:
    """Measure one page and take its screenshot; return the failures (strings)."""
    dom = run_chromium(binary, [f"--window-size={width},1000", "--dump-dom", f"{base}/{page}?probe"], profile)
    m = re.search(r'<pre id="site-check">(.*?)</pre>', dom, re.S)
    if not m:
        return [f"{name}: the probe did not report (did the page load?)"]
    import html

    result = json.loads(html.unescape(m.group(1)))
    height = min(int(result["height"]), 16000)
    run_chromium(binary, [f"--window-size={width},{height}", f"--screenshot={out / (name + '.png')}",
                          f"{base}/{page}"], profile)
    failures = []
    if result["page_scroll_width"] > result["width"]:
        failures.append(f"{name}: the page scrolls sideways ({result['page_scroll_width']} px > {result['width']} px)")
    failures += [f"{name}: raw TeX: {t!r}" for t in result["raw_tex"]]
    failures += [f"{name}: {o['element']} overflows the column ({o['column_right']} px): right {o['right']} px, "
                 f"scroll width {o['scroll_width']} > {o['client_width']} px: {o['text']!r}" for o in result["overflow"]]
    print(f"{name:36} column {result['column_width']} px, page {result['height']} px high, "
          f"raw TeX {len(result['raw_tex'])}, overflowing elements {len(result['overflow'])} -> {out / (name + '.png')}")
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=ROOT / "site", help="the built site (mkdocs build)")
    parser.add_argument("--out", type=Path, default=ROOT / "site-check", help="screenshots folder")
    parser.add_argument("--width", type=int, default=1280, help="window width in px (default 1280)")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        raise SystemExit(f"check_site.py: no {args.site}/index.html: build the site first (make docs)")
    args.out.mkdir(parents=True, exist_ok=True)
    binary = chromium()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(args.site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    failures = []
    with tempfile.TemporaryDirectory() as profile:
        for name, page in PAGES.items():
            failures += check_page(binary, base, name, page, args.width, args.out, profile)
    server.shutdown()
    if failures:
        print(f"\n{len(failures)} problem(s):")
        print("\n".join("  " + f for f in failures))
        return 1
    print(f"\nall {len(PAGES)} pages: no raw TeX, nothing wider than the column at {args.width} px")
    return 0


if __name__ == "__main__":
    sys.exit(main())
