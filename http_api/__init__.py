"""The REST API (aiohttp) and the Python client.

The only package that imports aiohttp's server (``aiohttp.web``). It knows the
node through the narrow :class:`http_api.kv_api.KvApi` protocol and maps
domain errors to HTTP statuses in one table (:mod:`http_api.errors`).
"""
