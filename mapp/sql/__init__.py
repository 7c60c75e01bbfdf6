"""SQL over a trace bundle: a DuckDB schema (events, ranks, collectives, p2p, iterations...),
a library of documented named queries, an interactive shell, and an optional Perfetto engine.

``open_database(DIR)`` -> ``TraceDatabase``; ``get_query(NAME)`` -> ``NamedQuery``;
``db.query(q.sql, q.bind({"limit": "5"}))`` -> ``QueryResult`` (Arrow rows).
"""

from mapp.sql.database import QueryResult, TraceDatabase, open_database
from mapp.sql.errors import QueryError, UnknownQueryError
from mapp.sql.library import NamedQuery, get_query, list_queries
from mapp.sql.schema import TABLES

__all__ = ["NamedQuery", "QueryError", "QueryResult", "TABLES", "TraceDatabase", "UnknownQueryError",
           "get_query", "list_queries", "open_database"]
