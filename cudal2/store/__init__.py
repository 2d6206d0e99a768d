"""What was measured, kept: the store (Optuna studies and every kernel's timings in SQLite or a
database server, cudal2.store.store), the tuned table the op serves from (cudal2.store.table), and
the journal file backend that survives a torn record (cudal2.store.journal). Below the search and the
op; above the evaluator, whose result types it stores."""
