"""The optional C codec (gateway/remoting/_codec.c); everything else is in pyproject.toml.

``optional=True``: where no C compiler works, the install goes on without it and the Python codec is used.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gateway.remoting._codec",
            ["gateway/remoting/_codec.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
            optional=True,
        )
    ]
)
