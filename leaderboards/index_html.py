"""``index.html``: every episode of the report in one table, sortable and filterable, each linked to its page.

Filters (environment, scenario, model, outcome, termination, free text) and the sort column live in the URL's
fragment (``index.html#outcome=failure&sort=reward``), so a filtered view can be linked to and reloaded. The
table is complete without the script; the script only hides and reorders rows.
"""

from __future__ import annotations

import io
import secrets
import tempfile
from collections.abc import Iterable
from typing import IO

from harness.schema import Trajectory
from leaderboards.page import esc, fmt_float, html_page
from leaderboards.report_html import episode_href

INDEX_FILE = "index.html"
FILTERS = ("environment", "scenario", "model", "outcome", "termination")
COLUMNS = (
    ("episode", "text"),
    ("model", "text"),
    ("environment", "text"),
    ("scenario", "text"),
    ("mode", "text"),
    ("trial", "num"),
    ("outcome", "text"),
    ("reward", "num"),
    ("termination", "text"),
    ("tool calls", "num"),
)

SCRIPT = """
(function () {
  const table = document.getElementById('episodes');
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  const controls = Array.from(document.querySelectorAll('[data-filter]'));
  const count = document.getElementById('shown');
  let sort = null, descending = false;
  function readHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    controls.forEach(c => { c.value = params.get(c.dataset.filter) || ''; });
    const key = params.get('sort');
    sort = key ? key.replace(/^-/, '') : null;
    descending = !!key && key.startsWith('-');
  }
  function writeHash() {
    const params = new URLSearchParams();
    controls.forEach(c => { if (c.value) params.set(c.dataset.filter, c.value); });
    if (sort) params.set('sort', (descending ? '-' : '') + sort);
    history.replaceState(null, '', '#' + params.toString());
  }
  function apply() {
    let shown = 0;
    rows.forEach(row => {
      const visible = controls.every(c => {
        if (!c.value) return true;
        if (c.dataset.filter === 'text') return row.textContent.toLowerCase().includes(c.value.toLowerCase());
        return row.dataset[c.dataset.filter] === c.value;
      });
      row.hidden = !visible;
      if (visible) shown += 1;
    });
    if (sort) {
      const header = table.querySelector('th[data-key="' + sort + '"]');
      const numeric = header && header.classList.contains('num');
      const value = row => row.querySelector('td[data-key="' + sort + '"]').dataset.value;
      const sorted = rows.slice().sort((a, b) => {
        const x = value(a), y = value(b);
        const order = numeric ? (parseFloat(x || '-1') - parseFloat(y || '-1')) : x.localeCompare(y);
        return descending ? -order : order;
      });
      sorted.forEach(row => body.appendChild(row));
    }
    table.querySelectorAll('th[data-key]').forEach(th => {
      th.setAttribute('aria-sort', th.dataset.key === sort ? (descending ? 'descending' : 'ascending') : 'none');
    });
    count.textContent = String(shown);
  }
  controls.forEach(c => c.addEventListener('input', () => { writeHash(); apply(); }));
  table.querySelectorAll('th[data-key]').forEach(th => th.addEventListener('click', () => {
    descending = sort === th.dataset.key ? !descending : false;
    sort = th.dataset.key;
    writeHash();
    apply();
  }));
  window.addEventListener('hashchange', () => { readHash(); apply(); });
  readHash();
  apply();
})();
"""


def outcome(trajectory: Trajectory) -> str:
    if trajectory.infra_error:
        return "infra_error"
    if trajectory.reward is None:
        return "unscored"
    return "success" if trajectory.reward.success else "failure"


def _key(label: str) -> str:
    return label.replace(" ", "_")


def _select(name: str, values: Iterable[str]) -> str:
    options = "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in sorted(set(values)))
    return (
        f'<label>{esc(name)} <select data-filter="{esc(name)}"><option value="">all</option>{options}</select></label>'
    )


def index_row(trajectory: Trajectory) -> tuple[dict[str, str], str]:
    """One episode's cells (by column key) and its row of the table."""
    reward = trajectory.reward.state_reward if trajectory.reward is not None else None
    cells = {
        "episode": trajectory.episode_id,
        "model": trajectory.agent.model.model,
        "environment": trajectory.environment_id,
        "scenario": trajectory.scenario_id,
        "mode": trajectory.mode,
        "trial": str(trajectory.trial),
        "outcome": outcome(trajectory),
        "reward": "" if reward is None else repr(reward),
        "termination": trajectory.termination.value,
        "tool_calls": str(trajectory.num_tool_calls),
    }
    data = " ".join(f'data-{name}="{esc(cells[name])}"' for name in FILTERS)
    tds = []
    for label, kind in COLUMNS:
        key = _key(label)
        value = cells[key]
        shown = fmt_float(reward) if key == "reward" else value
        if key == "episode":
            shown_html = f'<a href="{esc(episode_href(value))}">{esc(value[:24])}</a>'
        elif key == "outcome":
            css = {"success": "pass", "failure": "fail"}.get(value, "meta")
            shown_html = f'<span class="{css}">{esc(value)}</span>'
        else:
            shown_html = esc(shown)
        css_class = ' class="num"' if kind == "num" else ""
        tds.append(f'<td{css_class} data-key="{key}" data-value="{esc(value)}">{shown_html}</td>')
    return cells, f"<tr {data}>{''.join(tds)}</tr>"


class IndexPage:
    """The index page, built one episode at a time: each row is written to a spool file as it comes, and only its
    place in the table (environment, scenario, mode, trial, arrival) and where it was spooled are kept, with the
    values each filter offers. Rows are ordered by environment, scenario, mode and trial, ties in arrival order."""

    def __init__(self) -> None:
        self._spool: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115  (closed when the page's block ends)
        self._places: list[tuple[str, str, str, int, int, int, int]] = []
        self._values: dict[str, set[str]] = {name: set() for name in FILTERS}
        self._names: dict[str, str] = {}

    def __enter__(self) -> IndexPage:
        return self

    def __exit__(self, *_: object) -> None:
        self._spool.close()

    def _shared(self, text: str) -> str:
        return self._names.setdefault(text, text)

    def add(self, trajectory: Trajectory) -> None:
        cells, row = index_row(trajectory)
        for name in FILTERS:
            self._values[name].add(self._shared(cells[name]))
        data = row.encode("utf-8")
        offset = self._spool.seek(0, io.SEEK_END)
        self._spool.write(data)
        self._places.append(
            (
                self._shared(trajectory.environment_id),
                self._shared(trajectory.scenario_id),
                self._shared(trajectory.mode),
                trajectory.trial,
                len(self._places),
                offset,
                len(data),
            )
        )

    def write(self, handle: IO[bytes], title: str = "Episodes") -> None:
        """The whole page: one row per episode, no cap."""
        header = "".join(
            f'<th class="{"num" if kind == "num" else ""}" data-key="{_key(label)}" title="sort">{esc(label)}</th>'
            for label, kind in COLUMNS
        )
        filters = " ".join(_select(name, self._values[name]) for name in FILTERS)
        filters += ' <label>text <input data-filter="text" type="search" placeholder="any text"></label>'
        count = len(self._places)
        marker = f"rows-{secrets.token_hex(16)}"  # where the rows go in the page's frame
        body = (
            f"<h1>{esc(title)}</h1>"
            '<p class="meta"><a href="report.html">← the report</a> · '
            f'<span id="shown">{count}</span> of {count} episodes shown. Click a column to sort; filters and '
            "sort are kept in the address, so a view can be linked.</p>"
            f'<p class="filters">{filters}</p>'
            f'<table id="episodes"><thead><tr>{header}</tr></thead><tbody>{marker}</tbody></table>'
        )
        head, tail = html_page(title, body, script=SCRIPT).rsplit(marker, 1)
        handle.write(head.encode("utf-8"))
        self._places.sort()
        self._spool.flush()
        for *_, offset, length in self._places:
            self._spool.seek(offset)
            handle.write(self._spool.read(length))
        handle.write(tail.encode("utf-8"))


def render_index(trajectories: Iterable[Trajectory], title: str = "Episodes") -> str:
    """The whole index page of ``trajectories`` as text (see :class:`IndexPage`)."""
    with IndexPage() as page:
        for trajectory in trajectories:
            page.add(trajectory)
        buffer = io.BytesIO()
        page.write(buffer, title)
    return buffer.getvalue().decode("utf-8")
