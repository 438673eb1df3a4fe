"""The node side of the consistency audit: exporting the state and log at a cut.

A cut is a raft entry (AuditCut); every node exports when it applies it, so all
exports are at the same raft index. The comparison is spark_tools/.
"""
