"""The Model Context Protocol adapter: the memory's operations as MCP tools and resources.

``tools`` and ``resources`` are thin adapters over the same selectors and services the REST views call
(parse, authorize, call one service, render the REST contract's JSON); ``server`` binds them to the SDK's
low-level server; ``http`` serves it over Streamable HTTP at ``/mcp/`` (bearer = the API token) and the
``mcp_stdio`` command over stdio.
"""
