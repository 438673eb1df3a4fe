"""Bulk load (POST /v1/kv:load, `rkv load`, client.load) against real node processes.

The nodes run with small chunks (--load-chunk-keys 500) so that a few thousand
lines make several raft entries, and a small value limit (--max-value-bytes 4096)
so that the longest line a load reads (6 x (4096 + key limit) + 256 bytes) is
small enough to pass in a test.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from http_api.client import (
    AsyncRkvClient,
    InvalidRequestError,
    LoadInterrupted,
    LoadProgress,
    RkvClient,
)
from tests.support.cluster import LocalCluster, http, scan_all, wait_until

RKV = Path(sys.executable).with_name("rkv")
CHUNK = 500
MAX_VALUE = 4096

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def kv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(
        Path(tmp_path_factory.mktemp("load")) / "cluster",
        extra_args=["--load-chunk-keys", str(CHUNK), "--max-value-bytes", str(MAX_VALUE)],
    )
    try:
        running.start()
        yield running
    finally:
        running.stop()


def line(key: str, value: str) -> bytes:
    return json.dumps({"key": key, "value": value}).encode() + b"\n"


def lines(prefix: str, count: int, start: int = 0) -> list[bytes]:
    return [line(f"{prefix}{i:06d}", f"value-{i}") for i in range(start, start + count)]


def load(url: str, body: bytes, encoding: str = "utf-8") -> tuple[int, Any]:
    """POST a load; (status, the JSON error) or (200, the NDJSON lines decoded)."""
    answer = http("POST", f"{url}/v1/kv:load?encoding={encoding}", body, headers={}, timeout=60)
    if answer.status != 200:
        return answer.status, answer.json()
    assert answer.headers["Content-Type"].startswith("application/x-ndjson")
    return 200, [json.loads(raw) for raw in answer.body.splitlines()]


def stored(kv: LocalCluster, prefix: str, min_version: int) -> dict[bytes, bytes]:
    """The keys under ``prefix`` on every node (each waits until it has applied
    ``min_version``), checked to be the same everywhere."""
    found: list[dict[bytes, bytes]] = []
    for node in kv.nodes:
        query = f"consistency=stale&min_version={min_version}"
        found.append(
            {i["key"]: i["value"] for i in scan_all(node.url, prefix.encode(), query=query)}
        )
    assert found[0] == found[1] == found[2]
    return found[0]


def test_a_load_through_the_leader_and_a_follower_is_on_every_node(kv: LocalCluster) -> None:
    leader, follower = kv.leader(), kv.followers()[0]
    status, progress = load(leader.url, b"".join(lines("lead/", 3000)))
    assert status == 200
    assert progress[-1]["done"] is True
    assert (progress[-1]["loaded"], progress[-1]["lines"]) == (3000, 3000)
    counts = [p["loaded"] for p in progress[:-1]]
    assert counts == list(range(CHUNK, 3001, CHUNK))  # one line per committed chunk

    # Through a follower, base64 (the API's default encoding), with blank lines.
    body = b"".join(
        json.dumps(
            {"key": base64.b64encode(f"foll/{i:06d}".encode()).decode(), "value": "AAE="}
        ).encode()
        + (b"\n\n" if i % 100 == 0 else b"\n")
        for i in range(2000)
    )
    status, progress = load(follower.url, body, encoding="base64")
    assert status == 200
    done = progress[-1]
    assert (done["loaded"], done["lines"]) == (2000, 2020)

    led = stored(kv, "lead/", done["version"])
    assert len(led) == 3000 and led[b"lead/002999"] == b"value-2999"
    followed = stored(kv, "foll/", done["version"])
    assert len(followed) == 2000 and set(followed.values()) == {b"\x00\x01"}


def test_a_bad_line_answers_400_naming_it_with_the_lines_before_committed(
    kv: LocalCluster,
) -> None:
    leader = kv.leader()
    body = [*lines("bad1/", 249), b'{"key": "bad1/x"}\n', *lines("bad1/", 100, 300)]
    status, error = load(leader.url, b"".join(body))
    assert status == 400
    assert error["code"] == "invalid_request" and error["line"] == 250
    assert "line 250" in error["message"]
    assert (error["loaded"], error["lines"]) == (249, 249)
    found = stored(kv, "bad1/", error["version"])
    assert len(found) == 249 and b"bad1/000248" in found and b"bad1/000300" not in found


def test_a_bad_line_after_progress_is_the_streams_last_line(kv: LocalCluster) -> None:
    leader = kv.leader()
    # More chunks than --load-chunks-in-flight (4) before it: progress is sent first.
    bad = line("\x00rkv/members/x", "v")
    body = [*lines("bad2/", 2999), bad, *lines("bad2/", 10, 5000)]
    status, progress = load(leader.url, b"".join(body))
    assert status == 200
    last = progress[-1]
    assert last["error"]["code"] == "reserved_key" and last["error"]["line"] == 3000
    assert (last["loaded"], last["lines"]) == (2999, 2999)
    assert not any(p.get("done") for p in progress)
    assert len(stored(kv, "bad2/", last["version"])) == 2999


def test_a_line_over_the_limit_is_refused_without_reading_it_whole(kv: LocalCluster) -> None:
    leader = kv.leader()
    # 8 MiB without a newline: refused once the line passes the limit (about 50 KB here).
    body = b"".join(lines("long/", 2)) + b'{"key": "long/x", "value": "' + b"x" * (8 << 20)
    status, error = load(leader.url, body)
    assert status == 413 and error["code"] == "line_too_long"
    assert (error["line"], error["lines"], error["loaded"]) == (3, 2, 2)

    too_large = [*lines("big/", 5), line("big/x", "v" * (MAX_VALUE + 1))]
    status, error = load(leader.url, b"".join(too_large))
    assert status == 413 and error["code"] == "payload_too_large"
    assert (error["line"], error["loaded"]) == (6, 5)
    assert len(stored(kv, "big/", error["version"])) == 5
    assert len(stored(kv, "long/", error["version"])) == 2


def test_a_body_longer_than_the_body_limit_streams(kv: LocalCluster) -> None:
    """Any other request over 16 MiB is refused on its Content-Length; a load reads its
    body a line at a time and holds only its chunks, so its length is no limit."""
    value = "v" * MAX_VALUE
    body = b"".join(line(f"huge/{i:06d}", value) for i in range(4300))  # ~17.7 MB
    assert len(body) > 16 * 1024 * 1024
    status, progress = load(kv.leader().url, body)
    assert status == 200 and progress[-1]["loaded"] == 4300
    assert len(stored(kv, "huge/", progress[-1]["version"])) == 4300
    assert http("PUT", f"{kv.leader().url}/v1/kv/x", body, headers={}).status == 413


def test_a_load_needs_a_body(kv: LocalCluster) -> None:
    leader = kv.leader()
    assert http("POST", f"{leader.url}/v1/kv:load", None, headers={}).status == 400
    status, error = load(leader.url, b"")
    assert status == 400 and "empty" in error["message"]
    status, progress = load(leader.url, b"\n\n")  # blank lines: nothing to load, but lines
    assert status == 200 and progress == [{"done": True, "loaded": 0, "lines": 2, "version": 0}]
    with RkvClient(leader.url) as client:  # an empty source sends nothing
        assert client.load([], skip=3) == LoadProgress(0, 3, 0)


def test_the_clients_load_resumes_where_it_stopped(kv: LocalCluster) -> None:
    pairs = [(f"cl/{i:06d}", f"v{i}") for i in range(3000)]
    seen: list[LoadProgress] = []

    class Stop(Exception):
        pass

    def stop_after_the_first_chunk(progress: LoadProgress) -> None:
        seen.append(progress)
        raise Stop

    with RkvClient(kv.followers()[0].url) as client:
        with pytest.raises(Stop):
            client.load(pairs, progress=stop_after_the_first_chunk)
        committed = seen[0].lines
        assert 0 < committed < 3000
        rest = client.load(pairs, skip=committed)
        assert rest.lines == 3000 and rest.loaded == 3000 - committed  # nothing counted twice
        assert len(stored(kv, "cl/", rest.version)) == 3000

        with pytest.raises(LoadInterrupted) as stopped:
            client.load([("cl/a", "1")] * 11 + [("", "2")], skip=10)
        assert stopped.value.line == 12 and stopped.value.progress.lines == 11
        assert isinstance(stopped.value.cause, InvalidRequestError)
        assert "line 12:" in stopped.value.message

    async def through_the_async_client() -> LoadProgress:
        async with AsyncRkvClient(kv.leader().url) as client:
            return await client.load((f"as/{i}".encode(), b"x") for i in range(1200))

    done = asyncio.run(through_the_async_client())
    assert (done.loaded, done.lines) == (1200, 1200)
    assert len(stored(kv, "as/", done.version)) == 1200


def rkv(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "RKV_URL"}
    result = subprocess.run(
        [str(RKV), *args, "--url", url],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=environment,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def version_in(summary: str) -> int:
    """The version `rkv load` ends its summary with (reads wait until it is applied)."""
    match = re.search(r"; version (\d+)", summary)
    assert match, summary
    return int(match.group(1))


def test_rkv_load_stops_at_a_bad_line_and_resumes(kv: LocalCluster, tmp_path: Path) -> None:
    source = tmp_path / "data.jsonl"
    good = lines("cli/", 3000)
    broken = [*good[:1499], b"{not json\n", *good[1500:]]
    source.write_bytes(b"".join(broken))
    url = kv.leader().url

    first = rkv("load", str(source), url=url)
    assert first.returncode == 1
    assert "line 1500" in first.stderr and "1,499 committed" in first.stderr
    state = source.with_name("data.jsonl.rkv-load")
    assert json.loads(state.read_text())["committed"] == 1499

    source.write_bytes(b"".join(good))  # fixed
    second = rkv("load", str(source), "--resume", url=url)
    assert second.returncode == 0, second.stderr
    assert "1,501 keys loaded" in second.stderr and "1,499 lines skipped" in second.stderr
    assert not state.exists()
    found = stored(kv, "cli/", version_in(second.stderr))
    assert len(found) == 3000 and found[b"cli/001499"] == b"value-1499"

    missing = rkv("load", str(tmp_path / "none.jsonl"), url=url)
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_rkv_load_interrupted_resumes_the_rest(kv: LocalCluster, tmp_path: Path) -> None:
    source = tmp_path / "big.jsonl"
    source.write_bytes(b"".join(lines("int/", 60_000)))
    state = source.with_name("big.jsonl.rkv-load")
    leader = kv.leader()
    index = kv.nodes.index(leader)
    environment = {k: v for k, v in os.environ.items() if k != "RKV_URL"}
    running = subprocess.Popen(
        [str(RKV), "load", str(source), "--url", leader.url],
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    try:
        wait_until(state.exists, 60, "the first committed chunk in the state file")
        kv.pause(index)  # the load can go no further: interrupt it there
        running.send_signal(signal.SIGINT)
        _, stderr = running.communicate(timeout=60)
    finally:
        kv.resume(index)
        if running.poll() is None:
            running.kill()
    assert running.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    committed = json.loads(state.read_text())["committed"]
    assert 0 < committed < 60_000 and committed % CHUNK == 0

    urls = ",".join(node.url for node in kv.nodes)
    rest = rkv("load", str(source), "--resume", url=urls)
    assert rest.returncode == 0, rest.stderr
    assert f"{60_000 - committed:,} keys loaded" in rest.stderr  # nothing counted twice
    assert f"{committed:,} lines skipped" in rest.stderr
    assert len(stored(kv, "int/", version_in(rest.stderr))) == 60_000


def test_rkv_load_reads_csv(kv: LocalCluster, tmp_path: Path) -> None:
    rows = ["key,value"] + [f"csv/{i:05d},v{i}" for i in range(1500)]
    rows.append('csv/quoted,"a, ""b"" and a\nnewline"')
    source = tmp_path / "data.csv"
    source.write_text("\n".join(rows) + "\n")
    done = rkv("load", str(source), url=kv.leader().url)
    assert done.returncode == 0, done.stderr
    assert "1,501 keys loaded" in done.stderr
    found = stored(kv, "csv/", version_in(done.stderr))
    assert len(found) == 1501
    assert found[b"csv/quoted"] == b'a, "b" and a\nnewline'
    assert found[b"csv/01499"] == b"v1499"

    headless = tmp_path / "plain.txt"
    headless.write_text("key,value\nnh/a,1\n")
    plain = rkv("load", str(headless), "--format", "csv", "--no-header", url=kv.leader().url)
    assert plain.returncode == 0, plain.stderr
    three = tmp_path / "three.csv"
    three.write_text("a,b,c\n")
    refused = rkv("load", str(three), url=kv.leader().url)
    assert refused.returncode == 2 and "row 1: 3 columns" in refused.stderr
