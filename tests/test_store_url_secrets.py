"""A store URL's password never reaches the output: every command prints a store URL through
display_url (SQLAlchemy's own rendering with the password hidden, and query-string credentials
masked), whatever the password holds (an unencoded /, an @) or wherever it is (?password=).
CPU only, through CliRunner."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cudal2.cli import app
from cudal2.store.store import Store, display_url

runner = CliRunner()
RECORDED = ["--runner", "recorded"]

# a URL, and the parts of its credentials that must not be printed
URLS = {
    "password with an unencoded /": ("postgresql://u:pa/ss-9f2c@127.0.0.1/db", ["pa/ss", "ss-9f2c"]),
    "password in the query string": ("postgresql://u@127.0.0.1/db?password=qs-secret-77e1", ["qs-secret-77e1"]),
    "ssl password in the query string": ("postgresql://u:pw-a81d@127.0.0.1/db?sslpassword=ssl-secret-3b",
                                         ["pw-a81d", "ssl-secret-3b"]),
    "password with an @": ("postgresql://u:S3c@ret-41d9@127.0.0.1/db", ["S3c", "ret-41d9"]),
    "password with an @ and a /": ("postgresql://u:S3c@r/et-41d9@127.0.0.1/db", ["S3c", "r/et", "et-41d9"]),
    "not a URL SQLAlchemy parses": ("postgresql://u:pw-x5e@127.0.0.1:port/db", ["pw-x5e"]),
}


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAL2_STORE", str(tmp_path / "store.db"))
    monkeypatch.setenv("CUDAL2_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "250")  # a title or a line folded by the terminal would hide a leak
    monkeypatch.delenv("CUDAL2_DEBUG", raising=False)


def assert_hidden(text: str, case: str) -> None:
    _, parts = URLS[case]
    assert not [p for p in parts if p in text], text


@pytest.mark.parametrize("case", list(URLS))
def test_display_url_and_the_stores_repr_hide_the_password(case):
    url, _ = URLS[case]
    shown = display_url(url)
    assert_hidden(shown, case)
    assert shown.startswith("postgresql://") and shown.endswith(("127.0.0.1/db", "db?password=***",
                                                                 "db?sslpassword=***", "127.0.0.1:port/db"))
    assert "***" in shown
    assert_hidden(repr(Store(url)), case)
    from cudal2.redact import mask_urls  # for messages that hold a URL

    assert_hidden(mask_urls(f"could not connect to '{url}' (refused)"), case)


COMMANDS = {
    "search": ["search", "512x512x512", *RECORDED],
    "show": ["show"],
    "export": ["export", "--out", "{tmp}/t.json"],
    "dataset export": ["dataset", "export", "--out", "{tmp}/d.csv"],
    "train": ["train"],
    "sweep": ["sweep", "512x512x512", "--specs", "2", *RECORDED],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(URLS))
def test_no_command_prints_a_store_urls_password(command, case, tmp_path):
    url, _ = URLS[case]
    args = [a.format(tmp=tmp_path) for a in COMMANDS[command]] + ["--store", url]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output  # the driver is not installed here, or the URL is not one
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("error: ")]
    assert line.startswith("error: store postgresql://") and "***" in line
    assert_hidden(result.output, case)


def _sqlite_behind(url: str, tmp_path) -> Store:
    """A Store that shows `url` but keeps its data in a SQLite store under tmp_path: the commands'
    printing of a working store's URL, without a PostgreSQL server."""
    real = Store(tmp_path / "real.db")
    shown = Store(url)
    shown.engine, shown.optuna_storage = real.engine, real.optuna_storage
    return shown


@pytest.mark.parametrize("case", ["password with an unencoded /", "password in the query string",
                                  "password with an @"])
def test_the_dashboard_hint_and_shows_title_hide_the_password(case, tmp_path, monkeypatch):
    import cudal2.cli.search as cli_search

    url, _ = URLS[case]
    store = _sqlite_behind(url, tmp_path)
    monkeypatch.setattr(cli_search, "_store", lambda *given: store)
    searched = runner.invoke(app, ["search", "256x256x256", "--budget", "2", *RECORDED])
    assert searched.exit_code == 0, searched.output
    assert "optuna-dashboard postgresql://" in searched.output  # the hint
    shown = runner.invoke(app, ["show"])
    assert shown.exit_code == 0, shown.output
    assert "tuned shapes in postgresql://" in shown.output and "256x256x256" in shown.output  # the title
    for out in (searched.output, shown.output):
        assert_hidden(out, case)


def test_a_bugs_line_masks_a_store_url_in_its_message(monkeypatch):
    import cudal2.tuner.loop

    url, _ = URLS["password with an unencoded /"]

    def bug(*args, **kwargs):
        raise RuntimeError(f"lost the connection to {url} mid-write")

    monkeypatch.setattr(cudal2.tuner.loop, "run_search", bug)
    result = runner.invoke(app, ["search", "512x512x512", *RECORDED])
    assert result.exit_code == 1
    assert "unexpected RuntimeError: lost the connection to postgresql://u:***@127.0.0.1/db" in result.output
    assert_hidden(result.output, "password with an unencoded /")
