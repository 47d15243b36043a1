"""Inline SVG charts for the dashboard: no script, no external asset, readable at any width.

Every chart scales to its container (``width="100%"`` over a fixed ``viewBox``), reserves room for
its longest label and value so nothing is clipped, and carries its numbers as ``data-*`` attributes
so tests read what is drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape

CHAR_PX = 7.5  # a 13 px system-ui character, generously
ROW = 28
BAR = 18
BASELINES = {"eager": ("vs eager PyTorch", "#0969da"), "compile": ("vs torch.compile", "#8250df")}


def _svg(width: float, height: float, body: list[str], label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="100%" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'preserveAspectRatio="xMinYMin meet" style="max-width:{width:.0f}px" role="img" '
        f'aria-label="{escape(label)}">' + "".join(body) + "</svg>"
    )


def _text_px(text: str) -> float:
    return len(text) * CHAR_PX


def bar_chart(bars: Sequence[tuple[str, float, str]], *, label: str, unit: str = "") -> str:
    """Horizontal bars, one per (label, value, css colour), scaled to the largest value."""
    gutter = max((_text_px(name) for name, _, _ in bars), default=0.0) + 12
    values = [f"{v:g}{unit}" for _, v, _ in bars]
    room = max((_text_px(v) for v in values), default=0.0) + 10
    plot = 320.0
    width, height = gutter + plot + room, ROW * len(bars) + 8
    top = max((v for _, v, _ in bars), default=0.0) or 1.0
    body = []
    for i, ((name, value, colour), text) in enumerate(zip(bars, values, strict=True)):
        y = 4 + i * ROW
        length = 0 if value <= 0 else max(2.0, plot * value / top)
        data = f'data-bar="{escape(name)}" data-value="{value:g}"'
        body.append(f'<text x="0" y="{y + 17}" font-size="13">{escape(name)}</text>')
        body.append(_bar(gutter, y + 4, length, colour, f"{name}: {text}", text, data, 13))
    return _svg(width, height, body, label)


def _bar(x: float, y: float, length: float, colour: str, title: str, text: str, data: str, size: int) -> str:
    """A bar, its hover title, and its value after it (``data``: the label's data-* attributes)."""
    return (
        f'<rect x="{x:.1f}" y="{y}" width="{length:.1f}" height="{BAR}" fill="{colour}">'
        f"<title>{escape(title)}</title></rect>"
        f'<text x="{x + length + 6:.1f}" y="{y + 13}" font-size="{size}" {data}>{text}</text>'
    )


def _legend(x: float, y: float) -> tuple[list[str], float]:
    parts, at = [], x
    for key, (name, colour) in BASELINES.items():
        parts.append(
            f'<g data-legend="{key}"><rect x="{at:.1f}" y="{y}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{at + 16:.1f}" y="{y + 11}" font-size="13">{escape(name)}</text></g>'
        )
        at += 16 + _text_px(name) + 18
    return parts, at


def speedup_chart(rows: Sequence[tuple[str, float | None, float | None]]) -> str:
    """Per suggestion (label, speedup vs eager, vs torch.compile): two bars each, a dashed line at
    1.0x (left of it: slower than the baseline), and a legend."""
    top = max([1.0, *(v for _, e, c in rows for v in (e, c) if v)]) * 1.05
    gutter = max((_text_px(name) for name, _, _ in rows), default=0.0) + 12
    room = _text_px("00.00x") + 10
    plot = 360.0
    legend, legend_end = _legend(0, 4)
    width = max(gutter + plot + room, legend_end)
    pair = 2 * BAR + 12
    height = 28 + pair * len(rows) + 18
    body = list(legend)
    for i, (name, *values) in enumerate(rows):
        y = 28 + i * pair
        body.append(f'<text x="0" y="{y + BAR + 4}" font-size="13">{escape(name)}</text>')
        for j, (key, value) in enumerate(zip(BASELINES, values, strict=True)):
            if value is None:
                continue
            colour = BASELINES[key][1]
            length = max(2.0, plot * value / top)
            by = y + j * (BAR + 2)
            data = f'data-bar="{escape(name)}" data-baseline="{key}" data-value="{value:g}"'
            title = f"{name}: {value:.2f}x {BASELINES[key][0]}"
            body.append(_bar(gutter, by, length, colour, title, f"{value:.2f}x", data, 12))
    one = gutter + plot / top
    bottom = height - 16
    body.append(
        f'<line data-reference="1.0" x1="{one:.1f}" y1="24" x2="{one:.1f}" y2="{bottom}" stroke="#1f2328" '
        f'stroke-dasharray="4 3"/><text x="{one - 14:.1f}" y="{bottom + 13}" font-size="12">1.0x</text>'
    )
    return _svg(width, height, body, "speedup of each suggestion against eager PyTorch and torch.compile")


@dataclass(frozen=True)
class Point:
    at: datetime
    eager: float | None
    compile: float | None


def _running_geomeans(points: Sequence[Point], key: str) -> list[tuple[int, float]]:
    """(index, geometric mean of every value so far) for each point that has a value for ``key``."""
    logs: list[float] = []
    out = []
    for i, p in enumerate(points):
        value = getattr(p, key)
        if value:
            logs.append(math.log(value))
            out.append((i, math.exp(sum(logs) / len(logs))))
    return out


def trend_chart(points: Sequence[Point]) -> str:
    """The geometric mean speedup of every suggestion posted so far, against both baselines, in the
    order they were posted, with the 1.0x line; '' with fewer than two points."""
    points = sorted(points, key=lambda p: p.at)
    series = {key: _running_geomeans(points, key) for key in BASELINES}
    if max(len(s) for s in series.values()) < 2:
        return ""
    values = [1.0, *(v for s in series.values() for _, v in s)]
    least, most = min(values), max(values)
    low, high = least * 0.9, most * 1.1
    left, plot_w, plot_h, top = 52.0, 520.0, 160.0, 28.0
    legend, legend_end = _legend(left, 4)
    width, height = max(left + plot_w + 12, legend_end), top + plot_h + 34

    def x(i: int) -> float:
        return left + plot_w * (i / max(len(points) - 1, 1))

    def y(v: float) -> float:
        return top + plot_h * (1 - (math.log(v) - math.log(low)) / (math.log(high) - math.log(low)))

    body = list(legend)
    for v in sorted({least, 1.0, most}):
        body.append(f'<text x="0" y="{y(v) + 4:.1f}" font-size="12">{v:.2f}x</text>')
    body.append(
        f'<line data-reference="1.0" x1="{left}" y1="{y(1.0):.1f}" x2="{left + plot_w}" y2="{y(1.0):.1f}" '
        'stroke="#1f2328" stroke-dasharray="4 3"/>'
    )
    for key, s in series.items():
        colour = BASELINES[key][1]
        path = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in s)
        body.append(
            f'<polyline data-series="{key}" points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
        )
        for i, v in s:
            body.append(
                f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}" data-series="{key}" '
                f'data-value="{v:.4g}"><title>{points[i].at:%Y-%m-%d}: {v:.2f}x</title></circle>'
            )
    first, last = points[0].at, points[-1].at
    body.append(f'<text x="{left}" y="{height - 6}" font-size="12">{first:%Y-%m-%d}</text>')
    body.append(f'<text x="{left + plot_w - 74}" y="{height - 6}" font-size="12">{last:%Y-%m-%d}</text>')
    return _svg(width, height, body, "geometric mean speedup of the suggestions posted so far")
