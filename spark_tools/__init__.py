"""The PySpark consistency audit; the only package that imports pyspark.

Arrives with the audit issue.
"""
