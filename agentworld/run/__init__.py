"""Rollouts: run agents over dataset tasks through the proxy, score them, group them (`aw run`)."""
