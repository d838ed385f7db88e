"""The workflow's side: config checks, cost and budget estimates, the GPU job kit, and
the compositions behind the command line."""
