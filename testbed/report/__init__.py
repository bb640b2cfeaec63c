"""The report: renders a run directory's results (HTML, Markdown, CSV, figures, coverage matrix)."""
