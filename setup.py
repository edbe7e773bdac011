"""Build the proxy's optional C speedup (``agentworld/proxy/_chunks.c``); the rest of the
package, and all of its metadata, is in pyproject.toml.

Optional as aiohttp's are: where it does not compile (no compiler, no Python headers)
the install goes on without it and the proxy reads events in Python. ``AW_NO_EXTENSIONS=1``
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
        )
    ]
)
