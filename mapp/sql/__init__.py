"""SQL over a trace bundle: a DuckDB schema (events, ranks, collectives, p2p, iterations...),
a library of documented named queries, an interactive shell, and an optional Perfetto engine.

``open_database(DIR)`` -> ``TraceDatabase``; ``get_query(NAME)`` -> ``NamedQuery``;
``db.query(q.sql, q.bind({"limit": "5"}))`` -> ``QueryResult`` (Arrow rows).

The names below are imported on first use (PEP 562), so that importing ``mapp.sql.library``
(the CLI's help) does not load DuckDB.
"""

from mapp._lazy import lazy_exports

__all__ = ["NamedQuery", "QueryError", "QueryResult", "TABLES", "TraceDatabase", "UnknownQueryError",
           "get_query", "list_queries", "open_database"]

_HOMES = {"QueryResult": "database", "TraceDatabase": "database", "open_database": "database",
          "QueryError": "errors", "UnknownQueryError": "errors", "NamedQuery": "library",
          "get_query": "library", "list_queries": "library", "TABLES": "schema"}


__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
