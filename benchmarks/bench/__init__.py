"""``python -m benchmarks``: suites of training runs (benchmarks.bench.suites), run one at a time and
resumable (benchmarks.bench.runner), summarized with Student-t confidence intervals over seeds (the
control suite: stratified bootstrap) into summary.json, a Markdown table and an HTML report with
figures (benchmarks.bench.report)."""
