"""Leaves: errors, token estimates, lazy regexes, terminal-safe text, safe file reads and writes, state
files, native thread pools, argument schemas, secret redaction. Imports nothing else of mdmem's."""
