"""Campaign kinds: which stages run, what the planner enqueues, how results are reported.

Looked up by ``[campaign] kind`` through :data:`geoagent.engine.KINDS`.
"""
