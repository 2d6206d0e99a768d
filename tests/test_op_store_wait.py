"""The op's default store on a database server that cannot serve it (silent, refusing, no driver): one
warning and torch's result, within a bounded wait; a search's store check is bounded too."""

import socket
import sys
import threading
import time
import warnings

import pytest
import torch

import cudal2
from cudal2 import ops
from cudal2.store import store as store_mod
from cudal2.store.store import Store, StoreError


@pytest.fixture(autouse=True)
def _reread_table():
    ops.set_table(None)
    yield
    ops.set_table(None)


@pytest.fixture
def silent_server():
    """A loopback port that accepts connections and never sends a byte; closed after the test."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    held, stop = [], threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:  # the accept timeout, or the socket closed at the end
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    server.close()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _matmul_warns(match: str, within_s: float) -> None:
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    start = time.monotonic()
    with pytest.warns(RuntimeWarning, match=match) as caught:
        got = cudal2.matmul(a, b)
    assert time.monotonic() - start < within_s
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    assert torch.equal(got, torch.matmul(a, b))
    with warnings.catch_warnings(record=True) as again:  # said once: the next call asks no store
        warnings.simplefilter("always")
        assert torch.equal(cudal2.matmul(a, b), torch.matmul(a, b))
    assert not again


@pytest.mark.timeout(30)
def test_a_store_server_that_never_answers_is_one_warning_and_torch_within_the_wait(silent_server, monkeypatch):
    pytest.importorskip("psycopg")
    monkeypatch.setenv("CUDAL2_STORE", f"postgresql+psycopg://cudal2@127.0.0.1:{silent_server}/cudal2")
    monkeypatch.setenv("CUDAL2_STORE_TIMEOUT", "1")
    _matmul_warns(r"cudal2: store postgresql\+psycopg://.* did not answer within 1 s; .*CUDAL2_STORE_TIMEOUT", 3.0)


@pytest.mark.timeout(30)
def test_a_search_store_check_on_a_silent_server_gives_up_after_the_connect_timeout(silent_server, monkeypatch):
    pytest.importorskip("psycopg")
    monkeypatch.setattr(store_mod, "CONNECT_TIMEOUT_S", 2)  # (libpq's least)
    start = time.monotonic()
    with pytest.raises(StoreError, match="cannot be opened"):
        Store(f"postgresql+psycopg://cudal2@127.0.0.1:{silent_server}/cudal2").check()
    assert time.monotonic() - start < 6


@pytest.mark.timeout(30)
def test_a_store_server_that_refuses_the_connection_is_one_warning_and_torch_at_once(monkeypatch):
    pytest.importorskip("psycopg")
    monkeypatch.setenv("CUDAL2_STORE", f"postgresql+psycopg://cudal2@127.0.0.1:{_closed_port()}/cudal2")
    _matmul_warns(r"cudal2: store postgresql\+psycopg://.* cannot be opened \(.*refused", 1.5)


def test_a_store_whose_driver_is_not_installed_is_one_warning_that_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "pg8000", None)  # (absent, whatever is installed)
    monkeypatch.setenv("CUDAL2_STORE", f"postgresql+pg8000://cudal2@127.0.0.1:{_closed_port()}/cudal2")
    _matmul_warns(r"cudal2: store .*driver 'pg8000' is not installed; pip install", 1.5)


def test_the_store_wait_must_be_a_positive_number(monkeypatch):
    monkeypatch.setenv("CUDAL2_STORE", f"postgresql+pg8000://cudal2@127.0.0.1:{_closed_port()}/cudal2")
    monkeypatch.setenv("CUDAL2_STORE_TIMEOUT", "soon")
    _matmul_warns(r"\$CUDAL2_STORE_TIMEOUT is 'soon', not a number of seconds", 1.5)
