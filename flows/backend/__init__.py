"""Where Prefect keeps its state for odqa: a local PostgreSQL cluster (`postgres`), the database
a Prefect server uses (`database`), and one long-lived Prefect server per workspace
(`local_server`, run behind a Host check by `guarded_prefect`, stopped by its `watchdog`), with
the file modes every odqa process creates files with (`file_modes`). Nothing here imports Prefect at module level, so the CLI can decide which
server to use in milliseconds.
"""
