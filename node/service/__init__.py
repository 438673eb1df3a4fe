"""What the HTTP layer calls: validation, consistency levels, the audit's start.

http_api/ sees node/ only through this package (types.py names the domain types
the answers carry).
"""
