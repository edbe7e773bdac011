"""`aw tui`: a keyboard-first terminal UI to monitor, inspect and curate a pool (Textual).

Import ``agentworld.tui.app.make_app`` for the app; this package's ``__init__``
stays empty so ``agentworld.tui.command`` can be imported without Textual.
"""
