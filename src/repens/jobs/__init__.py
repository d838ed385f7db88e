"""Job types, the update rules' options and provenance: what a job is, below everything that runs one."""
