import contextlib
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubequeue.quantity import (
    QuantityError,
    format_milli,
    milli_value,
    parse_milli,
    parse_nano,
    unit_value,
)

# k8s.io/apimachinery/pkg/api/resource/quantity_test.go, TestQuantityParse: every input with the
# value it parses to, as (mantissa, power of ten), i.e. decQuantity(mantissa, exponent).
GO_PARSE_TABLE = [
    ("0", 0, 0),
    ("0n", 0, 0),
    ("0u", 0, 0),
    ("0m", 0, 0),
    ("0Ki", 0, 0),
    ("0k", 0, 0),
    ("0Mi", 0, 0),
    ("0M", 0, 0),
    ("0Gi", 0, 0),
    ("0G", 0, 0),
    ("0Ti", 0, 0),
    ("0T", 0, 0),
    ("1", 1, 0),
    ("1Ki", 1024, 0),
    ("8Ki", 8 * 1024, 0),
    ("7Mi", 7 * 1024**2, 0),
    ("6Gi", 6 * 1024**3, 0),
    ("5Ti", 5 * 1024**4, 0),
    ("4Pi", 4 * 1024**5, 0),
    ("3Ei", 3 * 1024**6, 0),
    ("10Ti", 10 * 1024**4, 0),
    ("100Ti", 100 * 1024**4, 0),
    ("5n", 5, -9),
    ("4u", 4, -6),
    ("3m", 3, -3),
    ("9", 9, 0),
    ("8k", 8, 3),
    ("50k", 5, 4),
    ("7M", 7, 6),
    ("6G", 6, 9),
    ("5T", 5, 12),
    ("40T", 4, 13),
    ("300T", 3, 14),
    ("2P", 2, 15),
    ("1E", 1, 18),
    ("1E-3", 1, -3),
    ("1e3", 1, 3),
    ("1E6", 1, 6),
    ("1e9", 1, 9),
    ("1E12", 1, 12),
    ("1e15", 1, 15),
    ("1E18", 1, 18),
    ("1e14", 1, 14),
    ("1e13", 1, 13),
    ("100.035k", 100035, 0),
    ("0.001", 1, -3),
    ("0.0005k", 5, -1),
    ("0.005", 5, -3),
    ("0.05", 5, -2),
    ("0.5", 5, -1),
    ("0.00050k", 5, -1),
    ("0.00500", 5, -3),
    ("0.05000", 5, -2),
    ("0.50000", 5, -1),
    ("0.5e0", 5, -1),
    ("0.5e-1", 5, -2),
    ("0.5e-2", 5, -3),
    ("10.035M", 10035, 3),
    ("1.2e3", 12, 2),
    ("1.3E+6", 13, 5),
    ("1.40e9", 14, 8),
    ("1.53E12", 153, 10),
    ("1.6e15", 16, 14),
    ("1.7E18", 17, 17),
    ("9.01", 901, -2),
    ("8.1k", 81, 2),
    ("7.123456M", 7123456, 0),
    ("6.987654321G", 6987654321, 0),
    ("5.444T", 5444, 9),
    ("40.1T", 401, 11),
    ("300.2T", 3002, 11),
    ("2.5P", 25, 14),
    ("1.01E", 101, 16),
    # "Things that saturate/round": up to the next nano-unit, away from zero.
    ("3.001n", 4, -9),
    ("1.1E-9", 2, -9),
    ("0.0000000001", 1, -9),
    ("0.0000000005", 1, -9),
    ("0.00000000050", 1, -9),
    ("0.5e-9", 1, -9),
    ("0.9n", 1, -9),
    ("0.00000012345", 124, -9),
    ("0.00000012354", 124, -9),
    # "We'll accept fractional binary stuff, too."
    ("100.035Ki", 10243584, -2),
    ("0.5Mi", 1024**2 // 2, 0),
    ("0.05Gi", 536870912, -1),
    ("0.025Ti", 274877906944, -1),
    # "Things written by trolls"
    ("0.000000000001Ki", 2, -9),
    (".001", 1, -3),
    (".0001k", 100, -3),
    ("1.", 1, 0),
    ("1.G", 1, 9),
]


def nanos(mantissa: int, exponent: int) -> int:
    return mantissa * 10 ** (exponent + 9)


@pytest.mark.parametrize(("text", "mantissa", "exponent"), GO_PARSE_TABLE)
@pytest.mark.parametrize("sign", ["", "+", "-"])
def test_apimachinery_parse_table(text: str, mantissa: int, exponent: int, sign: str) -> None:
    # Go checks every entry, and the same with "+" and with "-" in front.
    expected = nanos(mantissa, exponent)
    assert parse_nano(sign + text) == (-expected if sign == "-" else expected)


# TestQuantityParse's invalid list. Its last two, " 1" and "1 ", are refused by ParseQuantity
# alone but every Go client reads them through UnmarshalJSON, which trims white space first
# (TestJSONWhitespace: `" 1"` and `"1 "` decode to 1); see test_white_space_as_go_clients_see_it.
@pytest.mark.parametrize(
    "text", ["1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-"]
)
def test_apimachinery_invalid_table(text: str) -> None:
    with pytest.raises(QuantityError, match="not a valid quantity"):
        parse_nano(text)


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        (" 1", 1000),  # a literal space in the JSON string: trimmed by UnmarshalJSON
        ("1 ", 1000),
        ("\u00a02", 2000),  # so is any Unicode space that encoding/json does not escape
        ("3\u3000", 3000),
    ],
)
def test_white_space_as_go_clients_see_it(text: str, milli: int) -> None:
    assert parse_milli(text) == milli


@pytest.mark.parametrize(
    "text",
    [
        "1\n",  # encoding/json writes "1\n" escaped; Go parses the backslash and fails
        "\t1",
        "1\r\n",
        "1\u2028",  # escaped by encoding/json too
        "\x1c1",  # Python's str.strip() removes this; Go's TrimSpace does not
        "1 m",
        "\u0661",  # ARABIC-INDIC DIGIT ONE: a digit to Python's \d and Decimal, not to Go
        "\uff11",  # FULLWIDTH DIGIT ONE
        "1\u0662",
    ],
)
def test_rejects_what_go_rejects(text: str) -> None:
    with pytest.raises(QuantityError, match="not a valid quantity"):
        parse_nano(text)


# TestParseQuantity: 18-20 digit numbers around the int64 range. Value() of these is exact up to
# 2**63-1 units; beyond it Go returns a wrapped int64, and we refuse the quantity instead.
@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("999999999999999999", 999999999999999999),
        ("-999999999999999999", -999999999999999999),
        ("999999999999999999.1", 10**18),
        ("-999999999999999999.1", -(10**18)),
        ("1E", 10**18),
        ("-1.0E", -(10**18)),
        ("1.000000000000000001E", 10**18 + 1),
        ("1.0000000000000000001E", 10**18 + 1),
        ("9223372036854775806.1", 2**63 - 1),
        ("9223372036854775807", 2**63 - 1),
        ("9223372036854775807000m", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("-9223372036854775808000m", -(2**63)),
    ],
)
def test_apimachinery_int64_boundary_table(text: str, units: int) -> None:
    assert unit_value(parse_nano(text)) == units


@pytest.mark.parametrize(
    "text",
    [
        "9223372036854775807.1",
        "9223372036854775808",
        "9223372036854775808.0",
        "9999999999999999999",
        "-9223372036854775808.1",
        "-9223372036854775809",
        "10E",
        "12E",  # TestQuantityParse: kept as a decimal by Go, whose Value() then wraps
        "9Ei",  # TestQuantityParse: clamped to 2**63-1 by Go
        "9223372036854775807Ki",
        "8Ei",
        "1e100",
        "1e999997",  # raised decimal.Overflow
        "9" * 10_000,
    ],
)
def test_beyond_int64_is_too_large(text: str) -> None:
    with pytest.raises(QuantityError, match="too large"):
        parse_nano(text)


# TestQuantityRoundUp and TestScaledValue: MilliValue() and Value() round up, away from zero.
@pytest.mark.parametrize(
    ("text", "milli", "units"),
    [
        ("9.01", 9010, 10),
        ("-9.01", -9010, -10),
        ("1n", 1, 1),
        ("1u", 1, 1),
        ("1m", 1, 1),
        ("1", 1000, 1),
        ("1e2", 100_000, 100),
        ("0.0001", 1, 1),
        ("1.5Gi", 1536 * 2**20 * 1000, 1536 * 2**20),
        ("0.1Ki", 102_400, 103),
        ("-5n", -1, -1),  # was 0: a negative amount that passed as zero
        ("-0.5m", -1, -1),
        ("1.0000000000000000000000000001", 1001, 2),  # was 1000m: Decimal's 28-digit context
        ("1e-2000000", 1, 1),  # was 0
        ("1e-3000000", 1, 1),  # raised decimal.InvalidOperation
        ("0." + "0" * 10_000 + "1", 1, 1),
        ("1." + "0" * 5_000 + "1Ki", 1_024_001, 1025),
    ],
)
def test_milli_value_and_value_round_up(text: str, milli: int, units: int) -> None:
    assert parse_milli(text) == milli
    assert milli_value(parse_nano(text)) == milli
    assert unit_value(parse_nano(text)) == units


@pytest.mark.parametrize("text", ["+", "-", ".", "-.", "Gi", "Ti", "k", "e5", "e-9", "0e-20"])
def test_a_number_without_digits_is_zero_on_gos_fast_path(text: str) -> None:
    assert parse_nano(text) == 0


@pytest.mark.parametrize("text", ["Pi", "Ei", "e-10", ".e-10", "-E-12"])
def test_a_number_without_digits_fails_off_gos_fast_path(text: str) -> None:
    with pytest.raises(QuantityError, match="not a valid quantity"):
        parse_nano(text)


def test_exponent_is_an_int32_as_in_go() -> None:
    assert parse_milli("1e4294967296") == 1000  # int32(2**32) == 0
    assert parse_milli("1e4294967295") == 100  # int32(2**32 - 1) == -1
    with pytest.raises(QuantityError, match="not a valid quantity"):
        parse_milli("1e9223372036854775808")  # beyond int64: strconv.ParseInt fails


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


# "Gi" used to be here: Go reads it as zero (see test_a_number_without_digits_...).
@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "5GB", "1 Gi", "--1", "1e", "1x", "   "])
def test_rejects_malformed_quantities(text: str) -> None:
    with pytest.raises(QuantityError, match="not a valid quantity"):
        parse_milli(text)


def test_rejects_absurdly_large_quantity() -> None:
    with pytest.raises(QuantityError, match="too large"):
        parse_milli("1e100")
    with pytest.raises(QuantityError, match="too large"):
        parse_milli(10**30)


def test_rejects_booleans() -> None:
    with pytest.raises(QuantityError):
        parse_milli(True)


@pytest.mark.parametrize(
    "text",
    [
        "9" * 10_000,
        "1" * 10_000 + "x",
        "1." + "1" * 10_000 + "Ki",
        "1" * 5_000 + "." + "1" * 5_000 + "e-4990",
        "1e" + "0" * 10_000 + "5",
        "1e" + "9" * 10_000,
        "." * 10_000,
        "e" * 10_000 + "5",
        "1" * 200_000 + "e-199990",
    ],
)
def test_long_input_is_quick(text: str) -> None:
    start = time.perf_counter()
    with contextlib.suppress(QuantityError):
        parse_nano(text)
    assert time.perf_counter() - start < 0.25  # the Decimal parser took 5 s on the last one


_QUANTITY_ALPHABET = "0123456789.+-eEinumkKMGTP \t\n\u00a0\u0661"


@settings(max_examples=500, deadline=100)
@given(
    st.one_of(
        st.text(),
        st.text(alphabet=_QUANTITY_ALPHABET),
        st.from_regex(r"\A[+-]?[0-9]{0,30}(\.[0-9]{0,30})?([eE][+-]?[0-9]{1,12}|[KMGTPE]i?)?\Z"),
    )
)
def test_any_text_is_an_int_or_a_quantity_error(text: str) -> None:
    try:
        result = parse_milli(text)
    except QuantityError:
        return
    assert isinstance(result, int)


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
