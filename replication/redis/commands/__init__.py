"""Redis command semantics on rkv's key layout, one module per command family.

dispatch.py builds the table from the families; common.py holds what they share.
"""
