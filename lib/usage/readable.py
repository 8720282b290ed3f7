"""Numbers as a platform owner reads them: dollars with sensible precision, shares, counts, chart and table formats."""

from __future__ import annotations

import math

import pandas as pd


def money(value: float) -> str:
    """Dollars read at a glance: two significant digits under $1, cents under $100, whole dollars above."""
    if value != value:
        return "–"
    sign, value = ("-" if value < 0 else ""), abs(value)
    if value == 0:
        return "$0"
    if value < 1e-6:
        return "< $0.000001"
    if value < 1:
        value = float(f"{value:.2g}")  # may round up to 1
    if value < 1:
        text = f"{value:.{1 - math.floor(math.log10(value))}f}"
    elif value < 100:
        text = f"{value:,.2f}"
    else:
        text = f"{value:,.0f}"
    return f"{sign}${text}"


def headline_money(value: float) -> str:
    """Dollars on a metric card, a few characters wide: under a cent, "< $0.01" (the exact figure is `money`, in
    the card's help and the tables; "$0.000083" in a card's large type was cut to "$0.0000…")."""
    return "< $0.01" if 0 < value < 0.01 else money(value)


def percent(share: float | None) -> str:
    if share is None:
        return "–"
    if share == 0 or share == 1:
        return f"{share:.0%}"
    return "< 0.1%" if share < 0.001 else f"{share:.1%}"


def number(value: float) -> str:
    """Counts with thousands separators; read units can be halves."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def money_column_format(values: pd.Series) -> str:
    """A printf format for a table's $ column: two significant digits of its smallest amount (2 to 8 decimals)."""
    amounts = values.abs()
    amounts = amounts[amounts > 0]
    if amounts.empty:
        return "$%.2f"
    return f"$%.{min(8, max(2, 1 - math.floor(math.log10(amounts.min()))))}f"


def axis_money_format(top: float) -> str:
    """A d3 format for a dollar axis up to `top`: enough decimals for ticks a tenth of it, trailing zeros trimmed."""
    if top <= 0 or top >= 1:
        return "$,.2~f"
    return f"$,.{max(2, -math.floor(math.log10(top / 10)))}~f"
