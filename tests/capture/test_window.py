import pytest

from mapp.capture import Window


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        (Window(interval=5, length=2), [0, 1, 5, 6, 10, 11]),
        (Window(interval=1, length=2), list(range(12))),
        (Window(interval=4, length=2, start=3), [3, 4, 7, 8, 11]),
        (Window(interval=3, length=1, start=1, stop=8), [1, 4, 7]),
        (Window(interval=5, length=0), []),
    ],
)
def test_traced_iterations(window, expected):
    assert window.traced(range(12)) == expected


def test_rejects_bad_interval():
    with pytest.raises(ValueError, match="interval"):
        Window(interval=0)
