"""The rkv broker node, one room per job (docs/ARCHITECTURE.md draws the layers).

- ``errors``, ``keyspace``  the floor: domain errors and key rules
- ``storage/``   bytes on disk: commit log, LMDB (its only importer), compaction, recovery
- ``state/``     the deterministic state machine and its commands
- ``snapshot/``  whole-state files
- ``audit/``     the cut's export for the consistency audit
- ``service/``   what the HTTP layer calls
- ``cli/``       the composition root: the `rkv` commands and the node's wiring

Imports run one way (cli -> service -> audit -> {snapshot, state} -> storage ->
{errors, keyspace}); tools/import_rules.py states the rules and
tests/unit/test_import_rules.py checks them.
"""
