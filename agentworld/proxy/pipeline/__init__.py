"""The one call path of every recorded generation route (chat, completions, Messages, Responses).

``handler.py`` reads, identifies and threads a call; ``call.py`` numbers its step
and talks to the upstream; ``unary.py`` and ``stream.py`` answer it and record
its step in the order the durability mode promises; ``faults.py`` ends a call
that did not complete. What differs between wire formats is the adapter's
(``proxy/adapters/``).
"""
