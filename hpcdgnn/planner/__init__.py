"""Before a job is queued: predicted memory, traffic, balance and epoch time of every strategy (issue 59)."""
