"""GeoVerify (seed 000 Sec. 5): does a photo show a place within tau = 150 m of a named candidate?

Modules, in data-flow order: ``trials`` (trial builder), ``prompt`` (claim template), ``plan`` /
``settings`` (campaign planning and ``[geoverify]`` config), ``stages`` (planner messages, parser,
scorer and aggregator stages), ``parse`` (answer parser), ``score`` (scored rows), ``aggregate``
(incremental counts), ``campaign`` (engine kind), ``simulate`` (simulated answers). Statistics live in
:mod:`geoagent.scoring.sdt`, the report in :mod:`geoagent.report.geoverify`.
"""
