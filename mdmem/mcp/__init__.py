"""``mdmem mcp``: the tools over MCP on stdio. Nothing imports it but the command line."""
