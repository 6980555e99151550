"""Usage: the figures a turn adds up to (figures.py, pure), the daily rollup that keeps them
(repository, rollups), and the reports over it (reports, endpoints)."""
