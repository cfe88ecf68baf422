"""``asyncrl bench``: suites of training runs (asyncrl.bench.suites), run one at a time and resumable
(asyncrl.bench.runner), summarized with bootstrap confidence intervals into summary.json, a
Markdown table and an HTML report with figures (asyncrl.bench.report)."""
