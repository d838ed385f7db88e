"""The results contract: what the training jobs' result files hold and how they are read,
the names and columns of what the summaries write, and the statistics of the intervals,
read alike by the pipeline steps that compute (:mod:`repens.summaries`) and the reports that
draw (:mod:`repens.report`). Imports nothing of the package above :mod:`repens.core`."""
