"""The HTML report of bench/leases.py: the table, the settings, and what each row means."""

from __future__ import annotations

import html
from typing import Any


def render_html(rows: list[Any], meta: dict[str, Any]) -> str:
    """``rows``: bench.leases.Row (measurement, value, detail); ``meta``: the run's."""
    body = "".join(
        f"<tr><td>{html.escape(r.measurement)}</td><td>{html.escape(r.value)}</td>"
        f"<td>{html.escape(r.detail)}</td></tr>"
        for r in rows
    )
    about = "".join(f"<li>{html.escape(f'{k}: {v}')}</li>" for k, v in meta.items())
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rkv lease and lock benchmark</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:3px 10px}}td:nth-child(2){{text-align:right}}</style>
</head><body><h1>rkv lease and lock benchmark</h1>
<p>A 3-node cluster of real processes on loopback; every request to the leader over raw
HTTP. Keepalive: one client renews every lease, one request (or WebSocket message) of at
most 10,000 ids in flight; the leader's CPU is its process's user+system time in % of one
core. Expiry lag: leases of 2 s each with one attached key, never kept alive; the lag is
when a watch saw the key's delete minus the grant's acknowledgement + TTL (the watch polls
every 50 ms). Lock: acquire (POST /v1/locks/NAME) then release (DELETE) in a loop, each
contender with a lease of its own, all on one name.</p>
<ul>{about}</ul>
<table><tr><th>measurement</th><th>value</th><th>detail</th></tr>{body}</table>
</body></html>
"""
