"""The HTML report in a real headless Chromium: no console errors, and the table and plots are visible.

Needs Debian's ``chromium`` (``apt-get install -y chromium``). Console output is read from Chromium's own log
(``--enable-logging=stderr``), which carries every console message, script error and CSP violation.
"""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from leaderboards import build_leaderboard, write_leaderboard
from leaderboards.page import episode_file_name, html_page
from tests.support.leaderboard_runs import XSS_CHECK_ERROR, XSS_TEXT, write_sample_runs

WINDOW = (1400, 1800)
TABLE_HEADER_RGB = (0xDB, 0xE7, 0xF7)  # th background in leaderboards.page.STYLE
FIRST_SERIES_RGB = (0x1F, 0x77, 0xB4)  # first bar colour in leaderboards.plots


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "these tests need Debian's chromium: apt-get install -y chromium"
    return path


def _run_chromium(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *extra,
        page.resolve().as_uri(),
    ]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    return completed


def _console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Content Security Policy" in line]


class _DomSummary(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts = 0
        self.images: list[str] = []
        self.leaderboard_rows = 0
        self._in_leaderboard_body = False
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "script" or any(name.startswith("on") for name in attributes):
            self.scripts += 1
        if tag == "img":
            self.images.append(attributes.get("src") or "")
        if tag == "table" and attributes.get("class") == "leaderboard":
            self._in_leaderboard_body = True
        if tag == "tr" and self._in_leaderboard_body:
            self.leaderboard_rows += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_leaderboard_body = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _dom(stdout: str) -> _DomSummary:
    summary = _DomSummary()
    summary.feed(stdout)
    return summary


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = write_sample_runs(tmp_path_factory.mktemp("runs"))
    out = tmp_path_factory.mktemp("report")
    write_leaderboard(build_leaderboard([runs["a"], runs["b"]]), out, title="Seed leaderboard")
    return out


def test_console_check_sees_a_blocked_script(tmp_path: Path) -> None:
    """The console check below is only worth something if it catches a script that slipped through."""
    page = tmp_path / "leaky.html"
    page.write_text(html_page("leaky", "<p>hello</p><script>document.title = 'ran';</script>"))
    completed = _run_chromium(page, tmp_path / "profile", "--dump-dom")
    messages = _console_messages(completed.stderr)
    assert any("Content Security Policy" in message for message in messages), completed.stderr[-2000:]


def test_report_renders_without_console_errors(report_dir: Path, tmp_path: Path) -> None:
    completed = _run_chromium(report_dir / "report.html", tmp_path / "profile", "--dump-dom")
    assert _console_messages(completed.stderr) == []
    dom = _dom(completed.stdout)
    assert dom.scripts == 0
    assert dom.leaderboard_rows == 3, "a header row and one row per model"
    assert "model-a" in "".join(dom.text) and "model-b" in "".join(dom.text)
    plots = [src for src in dom.images if src.startswith("data:image/png;base64,")]
    assert len(plots) == 4
    for src in plots:
        image = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
        assert image.width > 300 and image.height > 150


def test_episode_page_renders_without_console_errors(report_dir: Path, tmp_path: Path) -> None:
    # every episode has a page (model-a: 9 episodes, model-b: 8), not only the failure lists' examples
    assert len(list((report_dir / "episodes").glob("*.html"))) == 17
    # this page carries the model's markup in a message and in a check's error
    page = report_dir / "episodes" / episode_file_name("model-a-s3-nonconv-0")
    completed = _run_chromium(page, tmp_path / "profile", "--dump-dom")
    assert _console_messages(completed.stderr) == []
    dom = _dom(completed.stdout)
    assert dom.scripts == 0
    text = "".join(dom.text)
    assert XSS_TEXT in text, "the model's markup arrives as visible text, not as elements"
    assert XSS_CHECK_ERROR in text
    assert "FAILED" in text and "orders › O-1 › status" in text


def _matching_rows(image: Image.Image, rgb: tuple[int, int, int], tolerance: int = 4) -> np.ndarray:
    """The y coordinate of every pixel whose colour is within ``tolerance`` of ``rgb``."""
    pixels = np.asarray(image.convert("RGB"), dtype=np.int16)
    close = np.all(np.abs(pixels - np.array(rgb, dtype=np.int16)) <= tolerance, axis=2)
    return np.nonzero(close)[0]


def test_screenshot_shows_the_table_above_a_plot(report_dir: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    _run_chromium(
        report_dir / "report.html",
        tmp_path / "profile",
        f"--screenshot={shot}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        "--hide-scrollbars",
    )
    image = Image.open(shot).convert("RGB")
    assert image.size == WINDOW

    grey = image.convert("L")
    histogram = grey.histogram()
    assert histogram[255] < 0.97 * WINDOW[0] * WINDOW[1], "the page is (nearly) blank"

    bars = _matching_rows(image, FIRST_SERIES_RGB)
    assert bars.size > 6000, "no plot bars are visible"
    plots_top = int(bars.min())
    # the leaderboard's header row (about 1,300 x 40 px) must be visible above the first plot
    header = _matching_rows(image, TABLE_HEADER_RGB)
    header_above_plots = header[header < plots_top]
    assert header_above_plots.size > 8000, "the leaderboard's header row is not visible above the plots"
    assert int(header_above_plots.min()) < WINDOW[1] // 4, "the table is at the top of the page"


def test_html_report_lists_each_run_with_links(report_dir: Path) -> None:
    report = (report_dir / "report.html").read_text()
    assert re.search(r"<h3>Run run-a \(model-a\)</h3>", report)
    assert re.search(r"<h3>Run run-b \(model-b\)</h3>", report)
    assert 'href="episodes/model-a-s3-nonconv-0.html"' in report


def _visible_index_rows(dom_html: str) -> list[dict[str, str]]:
    """The index rows Chromium left visible (the script marks filtered rows `hidden`), in DOM order."""
    rows = []
    for match in re.finditer(r"<tr ([^>]*data-outcome[^>]*)>(.*?)</tr>", dom_html, re.DOTALL):
        attributes = dict(re.findall(r'([\w-]+)="([^"]*)"', match.group(1)))
        if re.search(r"(^|\s)hidden(=|\s|$)", match.group(1)):
            continue
        reward = re.search(r'data-key="reward" data-value="([^"]*)"', match.group(2))
        link = re.search(r'href="([^"]+)"', match.group(2))
        rows.append({**attributes, "reward": reward.group(1) if reward else "", "href": link.group(1) if link else ""})
    return rows


def test_index_lists_every_episode_and_filters_and_sorts_in_chromium(report_dir: Path, tmp_path: Path) -> None:
    index = report_dir / "index.html"
    assert 'href="index.html"' in (report_dir / "report.html").read_text()
    completed = _run_chromium(index, tmp_path / "all", "--dump-dom")
    assert _console_messages(completed.stderr) == []  # the script runs under the page's CSP, by its hash
    every = _visible_index_rows(completed.stdout)
    assert len(every) == 17
    assert all((report_dir / row["href"]).is_file() for row in every)

    url = index.resolve().as_uri() + "#outcome=failure&environment=retail_orders&sort=-reward"
    command = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'filtered'}",
        "--enable-logging=stderr",
        "--v=0",
        "--dump-dom",
        url,
    ]
    filtered = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert filtered.returncode == 0 and _console_messages(filtered.stderr) == []
    shown = _visible_index_rows(filtered.stdout)
    assert shown and all(r["data-outcome"] == "failure" and r["data-environment"] == "retail_orders" for r in shown)
    expected = [r for r in every if r["data-outcome"] == "failure" and r["data-environment"] == "retail_orders"]
    assert len(shown) == len(expected)
    rewards = [float(r["reward"]) for r in shown]
    assert rewards == sorted(rewards, reverse=True)
    assert f'<span id="shown">{len(shown)}</span>' in filtered.stdout
