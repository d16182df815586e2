"""The sweep as an SVG chart, written by hand (no plotting library to install).

Two panels against the number of clients (log scale): p50 latency (log scale) and
embeddings per second; the server's single-sentence and batch lines solid, the in-process
references dashed in the same colours.
"""

from __future__ import annotations

import math
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 880, 360
PANEL_W, PANEL_H = 330, 240
LEFT, TOP = 80, 50
GAP = 110
COLOURS = {"single": "#1f77b4", "batch": "#d62728"}


def _log_ticks(low: float, high: float) -> list[float]:
    """1, 2, 5 times powers of ten spanning ``low``..``high`` (powers alone past three decades)."""
    ticks = []
    exponents = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    for exponent in exponents:
        for mantissa in (1, 2, 5) if len(exponents) <= 4 else (1,):
            value = mantissa * 10.0**exponent
            if low <= value <= high:
                ticks.append(value)
    return ticks or [low, high]


def _linear_ticks(high: float, count: int = 5) -> list[float]:
    raw = high / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return [step * n for n in range(int(high // step) + 1)]


def _label(value: float) -> str:
    return f"{value:g}" if value < 10_000 else f"{value / 1000:g}k"


class _Panel:
    def __init__(self, x0: float, title: str, x_values: list[int], y_range: tuple[float, float], log_y: bool):
        self.x0, self.title, self.log_y = x0, title, log_y
        self.x_low, self.x_high = min(x_values), max(x_values)
        self.y_low, self.y_high = y_range
        self.parts: list[str] = []

    def x(self, clients: float) -> float:
        if self.x_high == self.x_low:
            return self.x0 + PANEL_W / 2
        span = math.log(self.x_high) - math.log(self.x_low)
        return self.x0 + (math.log(clients) - math.log(self.x_low)) / span * PANEL_W

    def y(self, value: float) -> float:
        if self.log_y:
            fraction = (math.log(value) - math.log(self.y_low)) / (math.log(self.y_high) - math.log(self.y_low))
        else:
            fraction = (value - self.y_low) / (self.y_high - self.y_low)
        return TOP + PANEL_H * (1 - fraction)

    def frame(self, x_values: list[int], y_ticks: list[float], y_title: str) -> None:
        bottom = TOP + PANEL_H
        self.parts.append(
            f'<rect x="{self.x0}" y="{TOP}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#888"/>'
        )
        self.parts.append(f'<text x="{self.x0 + PANEL_W / 2}" y="{TOP - 16}" text-anchor="middle" '
                          f'font-weight="bold">{escape(self.title)}</text>')
        for clients in x_values:
            x = self.x(clients)
            self.parts.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 5}" stroke="#888"/>')
            self.parts.append(f'<text x="{x:.1f}" y="{bottom + 20}" text-anchor="middle">{clients}</text>')
        self.parts.append(f'<text x="{self.x0 + PANEL_W / 2}" y="{bottom + 40}" text-anchor="middle">clients</text>')
        for tick in y_ticks:
            y = self.y(tick)
            self.parts.append(f'<line x1="{self.x0}" y1="{y:.1f}" x2="{self.x0 + PANEL_W}" y2="{y:.1f}" stroke="#eee"/>')
            self.parts.append(f'<text x="{self.x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{_label(tick)}</text>')
        middle = TOP + PANEL_H / 2
        self.parts.append(f'<text x="{self.x0 - 55}" y="{middle}" text-anchor="middle" '
                          f'transform="rotate(-90 {self.x0 - 55} {middle})">{escape(y_title)}</text>')

    def line(self, points: list[tuple[int, float]], colour: str) -> None:
        path = " ".join(f"{self.x(c):.1f},{self.y(v):.1f}" for c, v in points)
        self.parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for c, v in points:
            self.parts.append(f'<circle cx="{self.x(c):.1f}" cy="{self.y(v):.1f}" r="3.5" fill="{colour}"/>')

    def level(self, value: float, colour: str) -> None:
        y = self.y(value)
        self.parts.append(f'<line x1="{self.x0}" y1="{y:.1f}" x2="{self.x0 + PANEL_W}" y2="{y:.1f}" '
                          f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="6 4"/>')


def sweep_svg(report: dict) -> str:
    sweep = report["sweep"]
    size = sweep["batch_size"]
    steps = [s for s in sweep["steps"] if (s["load"]["response_time_s"] or {}).get("p50")]
    if not steps:
        raise ValueError("no sweep step had a successful request")
    references = sweep["references"]
    clients = sorted({s["clients"] for s in steps})
    series = {
        payload: [(s["clients"], s["load"]) for s in steps if s["payload"] == payload] for payload in ("single", "batch")
    }

    latencies = [load["response_time_s"]["p50"] * 1000 for points in series.values() for _, load in points]
    reference_ms = {p: references["latency"][p]["p50"] * 1000 for p in ("single", "batch")}
    low = min(latencies + list(reference_ms.values())) / 1.5
    high = max(latencies + list(reference_ms.values())) * 1.5
    latency = _Panel(LEFT, "p50 latency", clients, (low, high), log_y=True)
    latency.frame(clients, _log_ticks(low, high), "ms")

    limit = references["sorted_limit"]["embeddings_per_s"]
    top = max([load["embeddings_per_s"] for points in series.values() for _, load in points] + [limit]) * 1.15
    rate = _Panel(LEFT + PANEL_W + GAP, "throughput", clients, (0, top), log_y=False)
    rate.frame(clients, _linear_ticks(top), "embeddings / s")

    for payload, points in series.items():
        colour = COLOURS[payload]
        if points:
            latency.line([(c, load["response_time_s"]["p50"] * 1000) for c, load in points], colour)
            rate.line([(c, load["embeddings_per_s"]) for c, load in points], colour)
        latency.level(reference_ms[payload], colour)
    rate.level(limit, "#555")

    legend_y = HEIGHT - 14
    legend = [
        (COLOURS["single"], "", "embedgate, 1 sentence"),
        (COLOURS["batch"], "", f"embedgate, {size} sentences"),
        ("#777", ' stroke-dasharray="6 4"', "in-process reference (dashed)"),
    ]
    parts, x = [], LEFT
    for colour, dash, text in legend:
        parts.append(f'<line x1="{x}" y1="{legend_y - 4}" x2="{x + 24}" y2="{legend_y - 4}" stroke="{colour}" '
                     f'stroke-width="2"{dash}/>')
        parts.append(f'<text x="{x + 30}" y="{legend_y}">{escape(text)}</text>')
        x += 60 + 7 * len(text)
    body = "\n".join(latency.parts + rate.parts + parts)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">\n'
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>\n{body}\n</svg>\n'
    )
