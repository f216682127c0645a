from __future__ import annotations

from django.apps import AppConfig


class McpConfig(AppConfig):
    """Installed for its ``mcp_stdio`` management command; it has no models."""

    name = "smartmemory_site.mcp"
    label = "smartmemory_mcp"
    verbose_name = "MCP server"
