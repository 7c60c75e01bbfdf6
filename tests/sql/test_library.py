"""The query library documents itself: every query, parameter and output column is described."""

from __future__ import annotations

import pytest

from mapp.errors import InputError
from mapp.sql import UnknownQueryError, get_query, list_queries
from mapp.sql.library import parse_query

EXPECTED = {"iteration_times", "rank_breakdown", "comm_overlap", "slowest_ops", "collective_skew",
            "last_arrivers", "p2p_bandwidth", "pipeline_bubbles", "top_ops", "gpu_neighbours"}


def test_the_library_holds_the_issue_s_queries():
    assert EXPECTED <= {q.name for q in list_queries()}


@pytest.mark.parametrize("query", list_queries(), ids=lambda q: q.name)
def test_every_query_is_documented(query, faulty):
    db, _, _ = faulty
    assert query.path is not None and query.path.stem == query.name
    assert not query.name.startswith("_")
    assert query.summary and query.description, "say what it answers"
    assert query.used_params == {p.name for p in query.params}, "every $param declared, every declared one used"
    assert all(p.description for p in query.params)
    result = db.query(query.sql, query.bind())
    assert [c.name for c in query.columns] == result.columns, "an @column line per output column, in order"
    assert all(c.description for c in query.columns)


def test_header_errors_are_caught():
    with pytest.raises(ValueError, match="first line"):
        parse_query("SELECT 1")
    with pytest.raises(ValueError, match="@param"):
        parse_query("-- q: x\n-- @param limit\nSELECT $limit")


def test_unknown_query_lists_the_close_names():
    with pytest.raises(UnknownQueryError) as caught:
        get_query("iteration_time")
    assert caught.value.close[0] == "iteration_times"
    assert "did you mean iteration_times" in str(caught.value)
    with pytest.raises(UnknownQueryError) as caught:
        get_query("bandwidth")
    assert "p2p_bandwidth" in caught.value.close
    with pytest.raises(UnknownQueryError):
        get_query("../../etc/passwd")


def test_parameters_are_typed_and_checked():
    query = get_query("slowest_ops")
    assert query.bind() == {"cat": "compute", "limit": 20}
    assert query.bind({"limit": "5", "cat": "p2p"}) == {"cat": "p2p", "limit": 5}
    with pytest.raises(InputError, match="not a valid INTEGER"):
        query.bind({"limit": "many"})
    with pytest.raises(InputError, match="no parameter 'top'"):
        query.bind({"top": "5"})


def test_the_readme_lists_every_query_and_table():
    from pathlib import Path

    import mapp.sql
    from mapp.sql import TABLES

    readme = (Path(mapp.sql.__file__).parent / "README.md").read_text()
    for query in list_queries():
        assert f"`{query.name}`" in readme, query.name
    for table in TABLES:
        assert f"### `{table}`" in readme, table
