"""The REST API (aiohttp) and the Python client.

The only package that imports aiohttp's server. It arrives with the cluster
issue.
"""
