"""The operator workflow: shadow runs with gates, promote with a guarded watch, verdicts and reports."""
