"""The shipped spec catalogs (cudal2/data/catalogs.json.gz, cudal2.proposers.catalog): current with the
code, used only while they are, and the same specs the code builds."""

from __future__ import annotations

import gzip
import json

from cudal2.ir.hardware import DEFAULT_ARCH
from cudal2.proposers import catalog


def test_the_shipped_catalogs_are_what_the_code_builds():
    data = json.loads(gzip.decompress(catalog.SHIPPED.read_bytes()))
    assert data["digest"] == catalog.inputs_digest(), \
        "cudal2/data/catalogs.json.gz is stale: run `python -m cudal2.proposers.catalog` and commit it"
    for name, axes in catalog.CATALOGS.items():
        for backend in axes:
            built = catalog._build(backend, DEFAULT_ARCH, name)
            loaded = catalog.catalog(backend, DEFAULT_ARCH, name)
            assert list(built) == loaded and [s.key() for s in built] == [s.key() for s in loaded], (backend, name)


def test_a_file_from_other_code_or_a_broken_one_is_not_used(tmp_path, monkeypatch):
    spec = catalog._build("triton", DEFAULT_ARCH, "base")[0]
    stale = {"digest": "other code", "catalogs": {f"triton/{DEFAULT_ARCH}/base": [spec.to_dict()]}}
    for content in (gzip.compress(json.dumps(stale).encode()), b"not gzip", gzip.compress(b"[1, 2]")):
        (tmp_path / "c.json.gz").write_bytes(content)
        monkeypatch.setattr(catalog, "SHIPPED", tmp_path / "c.json.gz")
        catalog._shipped.cache_clear()
        assert catalog._shipped() == {}
    catalog._shipped.cache_clear()


def test_write_shipped_round_trips(tmp_path, monkeypatch):
    path = catalog.write_shipped(tmp_path / "c.json.gz")
    monkeypatch.setattr(catalog, "SHIPPED", path)
    catalog._shipped.cache_clear()
    try:
        assert set(catalog._shipped()) == {f"{b}/{DEFAULT_ARCH}/{n}" for n, axes in catalog.CATALOGS.items() for b in axes}
    finally:
        catalog._shipped.cache_clear()
