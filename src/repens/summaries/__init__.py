"""Pipeline steps that compute what a table or figure shows and write it to a small file.

Each module here reads the jobs' result files, computes (with :mod:`repens.models.targets`,
:mod:`repens.evaluation.metrics`, :mod:`repens.evaluation.distances`) and writes its numbers under
``results/``; :mod:`repens.report` reads those files and only formats and draws. Run
each as ``python -m repens.summaries.<experiment> <command> ...`` (the workflow rules do).

* :mod:`repens.summaries.synthetic`: sample quality of the particle sets and the
  exact-i.i.d. noise floor; the exact samples and log-density grid of Figures 2 and F.1.
* :mod:`repens.summaries.toy`: each method's distance to HMC's predictive; the
  predictive moments and entropies of Figures 1 and 3.
"""
