"""Long-running processes: the file watcher, the ``mdmem watch`` daemon, the command-line socket
(protocol and server; the answer function is injected by the command line)."""
