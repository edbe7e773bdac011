"""Build the proxy's optional C speedups: ``agentworld/proxy/_chunks.c`` (streamed chat
events) and ``agentworld/proxy/_heads.c`` (HTTP heads); the rest of the package, and all
of its metadata, is in pyproject.toml.

Optional as aiohttp's are: where one does not compile (no compiler, no Python headers)
the install goes on without it and the proxy does that work in Python. ``AW_NO_EXTENSIONS=1``
skips the build too.
"""

import os

from setuptools import Extension, setup

NO_EXTENSIONS = os.environ.get("AW_NO_EXTENSIONS", "") not in ("", "0")

setup(
    ext_modules=[]
    if NO_EXTENSIONS
    else [
        Extension(
            "agentworld.proxy._chunks",
            ["agentworld/proxy/_chunks.c"],
            optional=True,
        ),
        Extension(
            "agentworld.proxy._heads",
            ["agentworld/proxy/_heads.c"],
            optional=True,
        ),
    ]
)
