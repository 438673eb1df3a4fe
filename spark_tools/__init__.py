"""The consistency audit's comparison (docs/AUDIT.md); the only package that imports pyspark.

spark_tools/audit_run.py runs an audit with either engine; only
spark_tools/engine_spark.py and spark_tools/spark_session.py import pyspark,
and only when the Spark engine runs.
"""
