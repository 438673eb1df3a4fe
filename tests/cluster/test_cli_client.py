"""The `rkv` client commands, run as a user runs them, against real node processes."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import LocalCluster, free_ports

RKV = Path(sys.executable).with_name("rkv")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def kv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(Path(tmp_path_factory.mktemp("cli")) / "cluster")
    try:
        running.start()
        yield running
    finally:
        running.stop()


def rkv(
    *args: str,
    url: str | None = None,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    command = [str(RKV), *args]
    if url is not None:
        command += ["--url", url]
    environment = {k: v for k, v in os.environ.items() if k != "RKV_URL"}
    result = subprocess.run(
        command,
        input=stdin,
        capture_output=True,
        check=False,
        timeout=60,
        env={**environment, **(env or {})},
    )
    assert b"Traceback" not in result.stderr, result.stderr.decode()
    return result


def out(result: subprocess.CompletedProcess[bytes]) -> str:
    return result.stdout.decode()


def err(result: subprocess.CompletedProcess[bytes]) -> str:
    return result.stderr.decode()


def test_put_get_delete(kv: LocalCluster) -> None:
    url = kv.nodes[0].url
    put = rkv("put", "cli/a b/c", "hello world", url=url)
    assert put.returncode == 0, err(put)
    version = int(out(put))

    got = rkv("get", "cli/a b/c", url=url)
    assert (got.returncode, got.stdout, got.stderr) == (0, b"hello world", b"")
    shown = rkv("get", "cli/a b/c", "--show-version", "--consistency", "leader", url=url)
    assert shown.stdout == b"hello world"
    assert err(shown).strip() == f"version {version} create_version {version}"
    assert rkv("-v", "get", "cli/a b/c", url=url).stderr.strip().startswith(b"version ")

    binary = bytes(range(256))
    assert rkv("put", "cli/bin", "-", url=url, stdin=binary).returncode == 0
    assert rkv("get", "cli/bin", url=url).stdout == binary

    conflict = rkv("put", "cli/a b/c", "x", "--if-version", str(version + 100), url=url)
    assert conflict.returncode == 1
    assert (
        err(conflict).strip() == f"rkv put cli/a b/c: version conflict: current version {version}"
    )
    exists = rkv("put", "cli/a b/c", "x", "--create-only", url=url)
    assert exists.returncode == 1 and "version conflict" in err(exists)
    cas = rkv("put", "cli/a b/c", "second", "--if-version", str(version), url=url)
    assert cas.returncode == 0 and int(out(cas)) > version

    deleted = rkv("delete", "cli/a b/c", url=url)
    assert deleted.returncode == 0 and int(out(deleted)) > version
    for command in ("get", "delete"):
        missing = rkv(command, "cli/a b/c", url=url)
        assert missing.returncode == 1
        assert err(missing).strip() == f"rkv {command} cli/a b/c: not found"
        assert missing.stdout == b""


def test_scan_lines_json_and_limits(kv: LocalCluster) -> None:
    url = kv.nodes[1].url
    keys = [f"cliscan/{i:02d}" for i in range(12)]
    body = {"success": [{"op": "put", "key": k, "value": f"value {k}"} for k in keys]}
    body["success"].append({"op": "put", "key": "cliscan/zz", "value": "two\nlines"})
    txn = rkv("txn", "-", "--utf-8", url=url, stdin=json.dumps(body).encode())
    assert txn.returncode == 0, err(txn)
    assert rkv("put", "cliscan/~bin", "-", url=url, stdin=b"\xff\xfe").returncode == 0

    scan = rkv("scan", "cliscan/", "--page-size", "5", url=url)
    assert scan.returncode == 0, err(scan)
    lines = out(scan).splitlines()
    assert [line.split("\t")[0] for line in lines] == [*keys, "cliscan/zz", "cliscan/~bin"]
    key, version, value = lines[0].split("\t")
    assert key == "cliscan/00" and int(version) > 0 and value == "value cliscan/00"
    assert lines[-2].split("\t")[2] == "base64:" + base64.b64encode(b"two\nlines").decode()
    assert lines[-1].split("\t")[2] == "base64:" + base64.b64encode(b"\xff\xfe").decode()

    limited = rkv("scan", "cliscan/", "--limit", "3", "--json", url=url)
    page = json.loads(out(limited))
    assert [base64.b64decode(i["key"]) for i in page["items"]] == [k.encode() for k in keys[:3]]
    more = rkv("scan", "cliscan/", "--start-after", page["next"], "--limit", "2", url=url)
    assert [line.split("\t")[0] for line in out(more).splitlines()] == keys[3:5]
    text = json.loads(out(rkv("scan", "cliscan/1", "--json", "--utf-8", url=url)))
    assert [i["value"] for i in text["items"]] == [f"value {k}" for k in keys[10:]]
    assert text["next"] is None
    assert rkv("scan", "cliscan/nothing", url=url).stdout == b""


def test_txn_from_a_file_and_stdin(kv: LocalCluster, tmp_path: Path) -> None:
    url = kv.nodes[2].url
    body = {
        "compare": [{"key": "clitxn/k", "exists": False}],
        "success": [
            {"op": "put", "key": "clitxn/k", "value": "v"},
            {"op": "get", "key": "clitxn/k"},
        ],
        "failure": [{"op": "get", "key": "clitxn/k"}],
    }
    path = tmp_path / "txn.json"
    path.write_text(json.dumps(body))
    first = rkv("txn", str(path), "--utf-8", url=url)
    assert first.returncode == 0, err(first)
    result = json.loads(out(first))
    assert result["succeeded"] is True
    assert result["results"][1] == {
        "op": "get",
        "key": "clitxn/k",
        "found": True,
        "value": "v",
        "version": result["version"],
        "create_version": result["version"],
    }
    again = json.loads(out(rkv("txn", str(path), "--utf-8", url=url)))
    assert again["succeeded"] is False and again["results"][0]["value"] == "v"

    encoded = {"success": [{"op": "get", "key": base64.b64encode(b"clitxn/k").decode()}]}
    raw = rkv("txn", "-", url=url, stdin=json.dumps(encoded).encode())
    assert json.loads(out(raw))["results"][0]["value"] == base64.b64encode(b"v").decode()

    bad_key = rkv("txn", "-", url=url, stdin=b'{"success": [{"op": "get", "key": "%%%"}]}')
    assert bad_key.returncode == 1 and "base64" in err(bad_key)


def test_urls_from_the_environment_and_lists(kv: LocalCluster) -> None:
    (dead,) = free_ports(1)
    dead_url = f"http://127.0.0.1:{dead}"
    listed = ",".join([dead_url, *(n.url for n in kv.nodes)])
    put = rkv("put", "cliurl/k", "v", env={"RKV_URL": listed})
    assert put.returncode == 0, err(put)
    got = rkv("get", "cliurl/k", "--url", dead_url, "--url", kv.nodes[2].url)
    assert got.returncode == 0 and got.stdout == b"v"


def test_unreachable_cluster_exits_3_with_one_line() -> None:
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    cases = (["get", "k"], ["put", "k", "v"], ["scan"], ["status"])
    started = time.monotonic()
    # The client retries with backoff (a few seconds) before it gives up: run them together.
    running = [
        subprocess.Popen(
            [str(RKV), *args, "--url", url], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for args in cases
    ]
    for args, proc in zip(cases, running, strict=True):
        stdout, stderr = proc.communicate(timeout=60)
        message = stderr.decode()
        assert proc.returncode == 3, (args, message)
        assert "Traceback" not in message and len(message.strip().splitlines()) == 1
        assert message.startswith(f"rkv {args[0]}") and "could be reached" in message
        assert stdout == b""
    assert time.monotonic() - started < 20


def test_usage_errors_exit_2() -> None:
    cases = [
        ["put"],
        ["put", "k"],
        ["put", "k", "v", "--if-version", "x"],
        ["put", "k", "v", "--if-version", "1", "--create-only"],
        ["get", "k", "--consistency", "eventual"],
        ["scan", "--limit", "0"],
        ["get", "k", "--url", "ftp://nowhere"],
        ["get", "", "--url", "http://127.0.0.1:9"],
        ["txn", "/no/such/file.json", "--url", "http://127.0.0.1:9"],
    ]
    for args in cases:
        result = rkv(*args)
        assert result.returncode == 2, (args, err(result))
        assert err(result).strip(), args
    not_json = rkv("txn", "-", "--url", "http://127.0.0.1:9", stdin=b"{not json")
    assert not_json.returncode == 2 and "not JSON" in err(not_json)
    a_list = rkv("txn", "-", "--url", "http://127.0.0.1:9", stdin=b"[]")
    assert a_list.returncode == 2 and "JSON object" in err(a_list)


# -- incr, append and idempotent producers ---------------------------------------------------


def test_incr_and_append(kv: LocalCluster) -> None:
    url = kv.nodes[0].url
    assert out(rkv("incr", "cliincr/n", url=url)).strip() == "1"
    assert out(rkv("incr", "cliincr/n", "--by", "41", url=url)).strip() == "42"
    assert out(rkv("incr", "cliincr/n", "--by", "-50", url=url)).strip() == "-8"
    assert rkv("get", "cliincr/n", url=url).stdout == b"-8"
    assert out(rkv("append", "cliincr/s", "ab", url=url)).strip() == "2"
    assert out(rkv("append", "cliincr/s", "-", url=url, stdin=b"\x00cd")).strip() == "5"
    assert rkv("get", "cliincr/s", url=url).stdout == b"ab\x00cd"

    not_int = rkv("incr", "cliincr/s", url=url)
    assert not_int.returncode == 1 and not_int.stdout == b""
    assert err(not_int).startswith("rkv incr cliincr/s: ") and "[not_an_integer]" in err(not_int)
    for bad in (["--by", "x"], ["--by", str(2**63)], ["--by", "1.5"]):
        usage = rkv("incr", "cliincr/n", *bad, url=url)
        assert usage.returncode == 2 and "--by" in err(usage), bad


def test_producer_init_and_exactly_once_writes(kv: LocalCluster) -> None:
    url = kv.nodes[1].url
    init = rkv("producer", "init", url=url)
    assert init.returncode == 0, err(init)
    producer_id, epoch = (int(x) for x in out(init).split())
    assert epoch == 0

    def write(
        sequence: int, *args: str, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        return rkv(*args, "--producer", f"{producer_id}:{epoch}:{sequence}", url=url, stdin=stdin)

    first = write(0, "incr", "cliprod/n", "--by", "5")
    assert (first.returncode, out(first).strip(), err(first)) == (0, "5", "")
    # A script retrying the same triple (its first answer was lost): the original
    # answer, a note on stderr, nothing applied again.
    retried = write(0, "incr", "cliprod/n", "--by", "5")
    assert retried.returncode == 0 and out(retried).strip() == "5"
    assert "note:" in err(retried) and "applied before" in err(retried)
    assert rkv("get", "cliprod/n", url=url).stdout == b"5"

    assert out(write(1, "append", "cliprod/s", "ab")).strip() == "2"
    version = int(out(write(2, "put", "cliprod/k", "v")))
    conflict = write(3, "put", "cliprod/k", "w", "--if-version", str(version + 100))
    assert conflict.returncode == 1 and "version conflict" in err(conflict)
    again = write(3, "put", "cliprod/k", "w", "--if-version", str(version + 100))
    assert again.returncode == 1 and "note:" in err(again)  # the same refusal, remembered
    body = json.dumps({"success": [{"op": "incr", "key": "cliprod/n", "by": 2}]}).encode()
    txn = write(4, "txn", "-", "--utf-8", stdin=body)
    assert txn.returncode == 0 and json.loads(out(txn))["results"][0]["value"] == 7
    assert json.loads(out(write(4, "txn", "-", "--utf-8", stdin=body))) == json.loads(out(txn))
    assert int(out(write(5, "delete", "cliprod/k"))) > version
    assert rkv("get", "cliprod/n", url=url).stdout == b"7"

    skipped = write(9, "incr", "cliprod/n")
    assert skipped.returncode == 1 and "[out_of_order_sequence]" in err(skipped)

    # The same transactional id: the same producer, the next epoch, the older fenced.
    named = [rkv("producer", "init", "--transactional-id", "cli-app", "--json", url=url)]
    named.append(rkv("producer", "init", "--transactional-id", "cli-app", "--json", url=url))
    first_init, second_init = (json.loads(out(r)) for r in named)
    assert first_init["producer_id"] == second_init["producer_id"]
    assert second_init["epoch"] == first_init["epoch"] + 1
    old = f"{first_init['producer_id']}:{first_init['epoch']}:0"
    fenced = rkv("incr", "cliprod/n", "--producer", old, url=url)
    assert fenced.returncode == 1 and "[producer_fenced]" in err(fenced)
    assert rkv("get", "cliprod/n", url=url).stdout == b"7"


def test_bad_producer_values_are_usage_errors() -> None:
    cases = [(["incr", "k"], value) for value in ("1:2", "a:b:c", "", "1::3", f"{2**63}:0:0")]
    cases += [(command, "1:2:-3") for command in (["put", "k", "v"], ["delete", "k"])]
    cases += [(command, "1:2:3:4") for command in (["append", "k", "v"], ["txn", "-"])]
    for command, value in cases:
        result = rkv(*command, f"--producer={value}", "--url", "http://127.0.0.1:9")
        assert result.returncode == 2, (value, command, err(result))
        assert "--producer" in err(result) and "ID:EPOCH:SEQ" in err(result)
