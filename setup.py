"""The optional C hot paths (the remoting codec, gateway/remoting/_codec.c, the store's records and index entries,
gateway/store/_store.c, and the Spark source's pulled records into Arrow columns, spark/_columns.c); everything else
is in pyproject.toml.

``optional=True``: where no C compiler works, the install goes on without them and the Python code is used.
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]

setup(
    ext_modules=[
        Extension(
            name,
            [source],
            depends=[
                "gateway/_native.h",
                "gateway/remoting/send_frame.h",
                "gateway/store/record.h",
                "gateway/store/crc32.h",
            ],
            extra_compile_args=FLAGS,
            optional=True,
        )
        for name, source in (
            ("gateway.remoting._codec", "gateway/remoting/_codec.c"),
            ("gateway.remoting._sender", "gateway/remoting/_sender.c"),
            ("gateway.store._store", "gateway/store/_store.c"),
            ("gateway.broker._send_lane", "gateway/broker/_send_lane.c"),
            ("spark._columns", "spark/_columns.c"),
        )
    ]
)
