"""A run's trace as a waterfall, for the run's admin page: one row per span,
indented under its parent, its bar placed on the run's time line."""

from __future__ import annotations

from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from claw_platform.observability.models import Span

_SHOWN_ATTRIBUTES = (
    "gen_ai.provider.name",
    "gen_ai.response.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.response.finish_reasons",
    "gen_ai.tool.call.id",
    "claw.cost_usd",
    "claw.run.status",
    "error.type",
)


def ordered_spans(spans: list[Span]) -> list[tuple[Span, int]]:
    """Depth-first, children in start order: (span, depth)."""
    children: dict[str, list[Span]] = {}
    ids = {s.span_id for s in spans}
    for span in spans:
        parent = span.parent_span_id if span.parent_span_id in ids else ""
        children.setdefault(parent, []).append(span)
    ordered: list[tuple[Span, int]] = []

    def walk(parent: str, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: (s.started_at, s.pk or 0)):
            ordered.append((span, depth))
            walk(span.span_id, depth + 1)

    walk("", 0)
    return ordered


def render_waterfall(spans: list[Span]) -> SafeString:
    if not spans:
        return mark_safe("<p>No trace was recorded for this run.</p>")
    start = min(s.started_at for s in spans)
    end = max(s.started_at.timestamp() + s.duration_ms / 1000 for s in spans)
    total = max(end - start.timestamp(), 1e-6)
    rows = []
    for span, depth in ordered_spans(spans):
        offset = (span.started_at - start).total_seconds() / total * 100
        width = max(span.duration_ms / 1000 / total * 100, 0.3)
        rows.append(_row(span, depth, offset, width))
    header = format_html(
        "<tr><th>span</th><th style='width:45%'>time line ({} ms)</th><th>ms</th><th>details</th></tr>",
        f"{total * 1000:.1f}",
    )
    body = format_html_join("", "{}", ((row,) for row in rows))
    return format_html("<table class='claw-waterfall' style='width:100%'>{}{}</table>", header, body)


def _row(span: Span, depth: int, offset: float, width: float) -> SafeString:
    colour = (
        "#ba2121" if span.status == "error" else {"chat": "#417690", "tool": "#5b8a3a"}.get(span.kind, "#888")
    )
    attributes = [(k, _short(span.attributes[k])) for k in _SHOWN_ATTRIBUTES if k in span.attributes]
    details = format_html_join(", ", "{}={}", attributes)
    if span.error:
        details = format_html("{} <strong>error:</strong> {}", details, span.error[:300])
    extra = mark_safe("")
    if span.input or span.output:
        extra = format_html(
            "<details><summary>input / output</summary><pre style='white-space:pre-wrap'>{}</pre>"
            "<pre style='white-space:pre-wrap'>{}</pre></details>",
            span.input,
            span.output,
        )
    return format_html(
        "<tr class='claw-span claw-span-{}'><td style='padding-left:{}em'>{}</td>"
        "<td><div style='position:relative;height:12px;background:#f2f2f2'>"
        "<div style='position:absolute;left:{}%;width:{}%;height:12px;background:{}'></div></div></td>"
        "<td>{}</td><td>{}{}</td></tr>",
        span.kind,
        depth * 1.5,
        span.name,
        f"{offset:.3f}",
        f"{width:.3f}",
        colour,
        f"{span.duration_ms:.1f}",
        details,
        extra,
    )


def _short(value: Any) -> str:
    text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    return text[:80]
