"""Tables and figures, read from the files the pipeline steps wrote: the reports only read
and draw. What a table or figure shows is computed first by :mod:`repens.summaries` (or by
the training jobs); no module here imports torch or the modules that compute
(``tests/report/test_reports_only_read.py``).

Submodules are imported on demand: :mod:`repens.report.synthetic` and
:mod:`repens.report.synthetic_figures` (the synthetic metrics table, Figures 2 and F.1),
:mod:`repens.report.toy` and :mod:`repens.report.toy_figures` (the distance to HMC,
Figures 1 and 3), :mod:`repens.report.image` (Table 1), :mod:`repens.report.uci` (Table 2),
:mod:`repens.report.claims` with :mod:`~repens.report.verdicts`,
:mod:`~repens.report.evidence` and :mod:`~repens.report.claim_list` (the claim scorecard),
:mod:`repens.report.claim_figures`, :mod:`repens.report.results_page`; shared:
:mod:`repens.report.tables`, :mod:`repens.report.figures`, :mod:`repens.report.style`,
:mod:`repens.results.files`. ``python -m repens.report`` runs the synthetic and toy reports.
"""
