"""The front: the proxy's own HTTP/1.1 server for recorded generation calls, aiohttp behind it.

aiohttp's web stack (request parsing into a ``web.Request``, routing, the
middleware chain, ``web.Response`` preparation, the access-log hook) cost
about as much CPU as the rest of a recorded call together. The front serves
the calls that make up nearly all of the traffic, a plain ``POST`` to
``/v1/chat/completions``, ``/v1/completions``, ``/v1/messages`` or
``/v1/responses`` under any trajectory prefix, with the same middlewares and
the same pipeline, and hands every other connection to aiohttp on its first
request it does not serve (``protocol.py``).

- ``http1.py``: the request heads it serves (anything unusual goes to aiohttp)
  and the heads of its answers;
- ``request.py``: ``FrontRequest``, what the pipeline reads of a request, and
  its answers (one write, or a chunked stream);
- ``protocol.py``: the connection, its timers, the handler's cancellation when
  the agent hangs up, the hand-off;
- ``site.py``: ``FrontSite`` (an aiohttp site: ``aw proxy`` and the in-process
  proxy listen through it) and ``aw proxy``'s serving loop.
"""
