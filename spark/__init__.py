"""PySpark for RocketMQ: the ``rocketmq`` Python data source (batch and streaming reads of any topic over
the remoting protocol) and the message-trace ingestion job (``python -m spark.trace_ingest``)."""

from .datasource import RocketMQDataSource

__all__ = ["RocketMQDataSource"]
