"""``index.html``: every episode of the report in one table, sortable and filterable, each linked to its page.

Filters (environment, scenario, model, outcome, termination, free text) and the sort column live in the URL's
fragment (``index.html#outcome=failure&sort=reward``), so a filtered view can be linked to and reloaded. The
table is complete without the script; the script only hides and reorders rows.
"""

from __future__ import annotations

from collections.abc import Iterable

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


def render_index(trajectories: list[Trajectory], title: str = "Episodes") -> str:
    """The whole index page: one row per episode, no cap."""
    values: dict[str, list[str]] = {name: [] for name in FILTERS}
    rows = []
    for trajectory in sorted(trajectories, key=lambda t: (t.environment_id, t.scenario_id, t.mode, t.trial)):
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
        for name in FILTERS:
            values[name].append(cells[name])
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
        rows.append(f"<tr {data}>{''.join(tds)}</tr>")
    header = "".join(
        f'<th class="{"num" if kind == "num" else ""}" data-key="{_key(label)}" title="sort">{esc(label)}</th>'
        for label, kind in COLUMNS
    )
    filters = " ".join(_select(name, values[name]) for name in FILTERS)
    filters += ' <label>text <input data-filter="text" type="search" placeholder="any text"></label>'
    body = (
        f"<h1>{esc(title)}</h1>"
        '<p class="meta"><a href="report.html">← the report</a> · '
        f'<span id="shown">{len(rows)}</span> of {len(rows)} episodes shown. Click a column to sort; filters and '
        "sort are kept in the address, so a view can be linked.</p>"
        f'<p class="filters">{filters}</p>'
        f'<table id="episodes"><thead><tr>{header}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )
    return html_page(title, body, script=SCRIPT)
