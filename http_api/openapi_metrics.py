"""The OpenAPI description of GET /metrics (http_api/routes_metrics.py)."""

from __future__ import annotations

from typing import Any


def metrics_paths() -> dict[str, Any]:
    return {
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics (text exposition; open without credentials)",
                "description": "Every metric is listed in docs/OBSERVABILITY.md. Absent "
                "(404) when the node runs with --metrics off.",
                "responses": {
                    "200": {
                        "description": "Prometheus text exposition format",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        }
    }
