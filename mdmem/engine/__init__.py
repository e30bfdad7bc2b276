"""One agent's memory at work: which provider it uses, keeping its index fresh (sync, repair, catch-up),
the background work (one loop, one backoff), the detached worker, status."""
