"""The one parser of suffixed numbers, and the forms each caller accepts through it."""

import pytest

from virtbench.conditions import hostres
from virtbench.sizes import BINARY, human, parse_suffixed
from virtbench.workloads import diskutil, mpi, mpijob


@pytest.mark.parametrize("text, kw, want", [
    ("64k", {"ignore_case": True}, 65536),
    ("4M", {"ignore_case": True}, 4 << 20),
    (" 8 g ", {"ignore_case": True}, 8 << 30),
    ("1MiB", {"ignore_case": True, "ib": True}, 1 << 20),
    ("2 GB", {"ignore_case": True, "ib": True}, 2 << 30),
    ("1.5k", {"ignore_case": True, "decimals": True}, 1536),
    ("1.0001k", {"ignore_case": True, "decimals": True, "truncate": True}, 1024),
    (4096, {}, 4096),
    (2.0, {}, 2),
])
def test_accepted_forms(text, kw, want):
    assert parse_suffixed(text, BINARY, **kw) == want


@pytest.mark.parametrize("text, kw", [
    ("1MiB", {"ignore_case": True}),          # no i/B unless asked
    ("64K", {}),                                # case matters unless asked
    ("1.5k", {"ignore_case": True}),            # no decimals unless asked
    ("1.0001k", {"ignore_case": True, "decimals": True}),  # a fraction of a unit must come out whole
    ("k", {"ignore_case": True}),
    ("1x", {"ignore_case": True}),
    (True, {}),
    (2.5, {}),
])
def test_refused_forms(text, kw):
    with pytest.raises(ValueError):
        parse_suffixed(text, BINARY, **kw)


def test_each_caller_keeps_its_own_rules_and_words():
    assert diskutil.parse_size("1MiB") == 1 << 20
    with pytest.raises(ValueError, match="is not a size such as 4k, 1m or 2g"):
        diskutil.parse_size("1.5k")  # fio and dd read whole numbers
    with pytest.raises(ValueError, match="not a positive size"):
        diskutil.parse_size("0")
    assert hostres.parse_size("1.5g") == 3 << 29
    assert mpi.message_size("0") == 0 and mpi.message_size("64K") == 65536
    with pytest.raises(ValueError, match="4096, 64K, 4M or 1G"):
        mpi.message_size("1T")  # vb-mpibench reads K, M and G only
    with pytest.raises(ValueError, match="outside 0 .. 1G"):
        mpi.message_size("2G")
    decimal = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
    assert mpijob.suffixed_int("1.5M", decimal, decimals=True) == 1_500_000


def test_human():
    assert human(512) == "512 B" and human(1536) == "1.5 KiB" and human(5 * 2**40) == "5.0 TiB"
