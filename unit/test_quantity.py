import pytest

from kubequeue.quantity import QuantityError, format_milli, parse_milli


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("1", 1000),
        ("500m", 500),
        ("0.5", 500),
        ("1.5", 1500),
        ("0.0001", 1),  # rounds up to the next milli-unit, as the API server does for CPU
        ("1Ki", 1024 * 1000),
        ("2Gi", 2 * 2**30 * 1000),
        ("5G", 5 * 10**9 * 1000),
        ("1e3", 1000 * 1000),
        ("1E-3", 1),
        ("100n", 1),
        ("+4", 4000),
        ("-2", -2000),
        (".5", 500),
        ("3.", 3000),
        (4, 4000),
        (0.25, 250),
    ],
)
def test_parses_kubernetes_quantities(text: str | int | float, milli: int) -> None:
    assert parse_milli(text) == milli


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "5GB", "1 Gi", "--1", "1e", "Gi", "1x"])
def test_rejects_malformed_quantities(text: str) -> None:
    with pytest.raises(QuantityError, match="not a valid quantity"):
        parse_milli(text)


def test_rejects_absurdly_large_quantity() -> None:
    with pytest.raises(QuantityError, match="too large"):
        parse_milli("1e100")


def test_rejects_booleans() -> None:
    with pytest.raises(QuantityError):
        parse_milli(True)


@pytest.mark.parametrize(
    ("resource", "milli", "text"),
    [
        ("cpu", 2000, "2"),
        ("cpu", 1500, "1500m"),
        ("memory", 4 * 2**30 * 1000, "4Gi"),
        ("memory", 1536 * 2**20 * 1000, "1536Mi"),
        ("memory", 1500 * 2**20 * 1000 + 1000, "1.5Gi"),
        ("nvidia.com/gpu", 2000, "2"),
    ],
)
def test_formats_for_humans(resource: str, milli: int, text: str) -> None:
    assert format_milli(resource, milli) == text
