"""Message trace (RMQ_SYS_TRACE_TOPIC): the record format clients write, shared by the Python client's
trace hooks and the PySpark ingestion in ``spark/``."""
