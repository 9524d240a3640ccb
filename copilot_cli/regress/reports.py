"""Report writers: JSON, JUnit XML, Markdown (for $GITHUB_STEP_SUMMARY) and self-contained HTML."""

from __future__ import annotations

import html
import math
from pathlib import Path
from xml.etree import ElementTree as ET

from copilot_cli.core.artifacts import canonical_json, write_bytes
from copilot_cli.core.metrics import Summary
from copilot_cli.core.outputs import claim_file
from copilot_cli.regress.gate import verdict
from copilot_cli.regress.options import ReportPaths, Thresholds
from copilot_cli.regress.results import RegressResult, VariantResult

MARKDOWN_LIMIT = 1 << 20
REPORT_FORMAT = "copilot-opt.regress-report"
# How each text report begins, always: an existing file is replaced only if it starts so
# (core/outputs.py); the JSON report names REPORT_FORMAT instead.
SIGNATURES = {
    "junit": b'<?xml version="1.0" encoding="utf-8"?>\n<testsuites name="copilot-opt regress"',
    "markdown": b"## copilot-opt regress: ",
    "html": b"<!doctype html><html><head><meta charset='utf-8'><title>copilot-opt regress</title>",
}


def to_json(result: RegressResult) -> str:
    return canonical_json(result.to_dict())


def claim_reports(paths: ReportPaths, inputs: tuple[Path, ...] = ()) -> None:
    """Refuse, before any work, a report path holding something other than that report."""
    for name in ("json", "junit", "markdown", "html"):
        claim_file(
            getattr(paths, name),
            name,
            fmt=REPORT_FORMAT if name == "json" else None,
            signature=SIGNATURES.get(name),
            label=f"regress {name} report",
            inputs=inputs,
        )


def write_reports(result: RegressResult, paths: ReportPaths) -> list[str]:
    """Write each report `paths` names (atomically); returns the paths written."""
    written = []
    for path, render in (
        (paths.json, to_json),
        (paths.junit, junit_xml),
        (paths.markdown, markdown),
        (paths.html, html_report),
    ):
        if path is not None:
            write_bytes(path, render(result).encode("utf-8"))
            written.append(str(path))
    return written


def _fmt(value: float | None, spec: str = ".3g") -> str:
    if value is None:
        return "–"
    return "NaN" if isinstance(value, float) and math.isnan(value) else format(value, spec)


def summary_line(s: Summary) -> dict[str, str]:
    return {
        "mean KL ± SE": f"{_fmt(s.kl_mean)} ± {_fmt(s.kl_se, '.2g')}",
        "KL p99 / max": f"{_fmt(s.kl_percentiles['p99'])} / {_fmt(s.kl_max)}",
        "same top-1": f"{s.same_top1:.2%} ± {s.same_top1_se:.2%}",
        "Δp mean / RMS": f"{_fmt(s.delta_p_mean, '.2g')} / {_fmt(s.delta_p_rms, '.2g')}",
        "top-5 overlap": f"{s.top5_overlap:.3f}",
        "PPL ratio": _fmt(s.ppl_ratio, ".4f"),
    }


def thresholds_text(t: Thresholds) -> str:
    """The gate in one sentence; lax thresholds (allowed explicitly) named at its end."""
    text = (
        f"Thresholds: mean KL ≤ {t.max_mean_kl:g} (95% upper bound), same top-1 ≥ "
        f"{t.min_same_top1:.0%} (95% lower bound), per-prompt mean KL ≤ {t.max_prompt_kl:g}"
    )
    for name in ("min_exact_match", "min_bleu"):
        if getattr(t, name) is not None:
            text += f", {name} ≥ {getattr(t, name):g}"
    lax = t.lax()
    if lax:
        text += ". LAX THRESHOLDS (allowed explicitly): " + "; ".join(
            f"{name} {why}" for name, why in lax.items()
        )
    return text + "."


UNCHECKED_BASELINE = (
    "BASELINE NOT CHECKED (baseline_check 0): the original's log-probs were read from the "
    "baseline with no case recomputed, so an edited or resealed baseline would pass"
)


def gate_text(result: RegressResult) -> str:
    """The thresholds sentence, and what was switched off: lax thresholds, the baseline check."""
    text = thresholds_text(result.thresholds)
    if result.provenance.unchecked_baseline:
        text += f" {UNCHECKED_BASELINE}."
    return text


def _weakened(result: RegressResult) -> bool:
    return bool(result.thresholds.lax()) or result.provenance.unchecked_baseline


def junit_xml(result: RegressResult) -> str:
    """One testcase per variant × prompt group; a failure carries the numbers."""
    suites = ET.Element("testsuites", name="copilot-opt regress")
    for variant in result.variants:
        suite = ET.SubElement(suites, "testsuite", name=f"regress.{variant.name}")
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", name="thresholds", value=gate_text(result))
        cases = 0
        failures = 0
        for group, summary in sorted(variant.groups.items()):
            prompts = {
                k: v for k, v in variant.prompt_kl.items() if k in _group_cases(variant, group)
            }
            reasons = verdict(summary, prompts, None, result.thresholds)
            case = ET.SubElement(
                suite, "testcase", classname=f"regress.{variant.name}", name=group, time="0"
            )
            cases += 1
            details = "; ".join(f"{k}: {v}" for k, v in summary_line(summary).items())
            if reasons:
                failures += 1
                failure = ET.SubElement(case, "failure", message="; ".join(reasons))
                failure.text = details
            else:
                ET.SubElement(case, "system-out").text = details
        overall = ET.SubElement(
            suite, "testcase", classname=f"regress.{variant.name}", name="all prompts", time="0"
        )
        cases += 1
        if variant.failures:
            failures += 1
            ET.SubElement(overall, "failure", message="; ".join(variant.failures)).text = "; ".join(
                f"{k}: {v}" for k, v in summary_line(variant.summary).items()
            )
        suite.set("tests", str(cases))
        suite.set("failures", str(failures))
    if result.partial is not None:  # an unfinished run never reads as green
        suite = ET.SubElement(suites, "testsuite", name="regress", tests="1", failures="1")
        case = ET.SubElement(suite, "testcase", classname="regress", name="complete", time="0")
        ET.SubElement(case, "failure", message=f"partial report: {result.partial}")
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode")


def _group_cases(variant: VariantResult, group: str) -> set[str]:
    return (
        set(variant.position_kl)
        if group == "all"
        else {case for case in variant.prompt_kl if variant.case_group.get(case) == group}
    )


def markdown(result: RegressResult) -> str:
    verdict_text = "✅ all variants pass" if result.passed else "❌ regression"
    if result.partial is not None:
        verdict_text = f"⏸ partial report, no verdict ({result.partial})"
    lines = [
        f"## copilot-opt regress: {verdict_text}",
        "",
        f"{gate_text(result)} "
        f"Model `{result.provenance.model_fingerprint[:16]}`, "
        f"{result.provenance.prompt_count} prompts.",
        "",
        "| variant | positions | mean KL ± SE | KL p99 / max | same top-1 | Δp mean / RMS | "
        "top-5 | PPL ratio | greedy exact / BLEU-4 / Lev | result |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in result.variants:
        s = summary_line(v.summary)
        gen = v.generation
        gen_text = (
            f"{gen.exact_match:.0%} / {gen.bleu4:.3f} / {gen.levenshtein:.3f}" if gen else "–"
        )
        lines.append(
            f"| `{v.name}` | {v.summary.positions} | {s['mean KL ± SE']} | "
            f"{s['KL p99 / max']} | {s['same top-1']} | {s['Δp mean / RMS']} | "
            f"{s['top-5 overlap']} | {s['PPL ratio']} | {gen_text} | "
            f"{'pass' if v.passed else '**FAIL**'} |"
        )
    for v in result.variants:
        if v.failures:
            lines += ["", f"**{v.name}** fails: " + "; ".join(v.failures)]
    lines += [
        "",
        "### Worst positions",
        "",
        "| variant | prompt | pos | KL | context | base → variant |",
        "|---|---|---|---|---|---|",
    ]
    for v in result.variants:
        for w in v.worst[:5]:
            context = w.context[-60:].replace("\n", "⏎").replace("|", "\\|")
            lines.append(
                f"| `{v.name}` | {w.case} | {w.position} | {_fmt(w.kl)} | "
                f"`{context}` | `{w.base_top!r}` → `{w.variant_top!r}` |"
            )
    text = "\n".join(lines) + "\n"
    return text if len(text.encode()) < MARKDOWN_LIMIT else text[: MARKDOWN_LIMIT // 2] + "\n…\n"


def _histogram_svg(values: list[float], width: int = 420, height: int = 150) -> str:
    logs = [math.log10(v) for v in values if v > 0 and math.isfinite(v)]
    zeros = sum(1 for v in values if v == 0)
    if not logs:
        return f"<p>all {len(values)} positions have KL = 0</p>"
    lo, hi = math.floor(min(logs)), math.ceil(max(logs))
    hi = hi if hi > lo else lo + 1
    bins = [0] * 30
    for v in logs:
        bins[min(int((v - lo) / (hi - lo) * 30), 29)] += 1
    top = max(bins)
    bar = (width - 40) / 30
    rects = "".join(
        f'<rect x="{30 + i * bar:.1f}" y="{height - 20 - c / top * (height - 30):.1f}" '
        f'width="{bar - 1:.1f}" height="{c / top * (height - 30):.1f}" fill="#3b6ea5">'
        f"<title>{c} positions</title></rect>"
        for i, c in enumerate(bins)
    )
    ticks = "".join(
        f'<text x="{30 + (e - lo) / (hi - lo) * (width - 40):.1f}" y="{height - 5}" '
        f'font-size="10" text-anchor="middle">1e{e}</text>'
        for e in range(lo, hi + 1)
    )
    note = f"<p class='note'>{zeros} positions with KL = 0 not shown.</p>" if zeros else ""
    return (
        f'<svg width="{width}" height="{height}" role="img" aria-label="KL histogram">'
        f"{rects}{ticks}</svg>{note}"
    )


def _line_svg(values: list[float], width: int = 420, height: int = 110) -> str:
    if len(values) < 2:
        return ""
    top = max(values) or 1.0
    step = (width - 20) / (len(values) - 1)
    points = " ".join(
        f"{10 + i * step:.1f},{height - 10 - v / top * (height - 20):.1f}"
        for i, v in enumerate(values)
    )
    return (
        f'<svg width="{width}" height="{height}" role="img" aria-label="KL per position">'
        f'<polyline points="{points}" fill="none" stroke="#b5452f" stroke-width="1.5"/>'
        f'<text x="12" y="12" font-size="10">max {top:.3g}</text></svg>'
    )


def html_report(result: RegressResult) -> str:
    """A single self-contained HTML file: verdicts, tables and inline SVG plots."""
    esc = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>copilot-opt regress</title>",
        "<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;"
        "font-size:13px;text-align:left}.pass{color:#1a7f37}.fail{color:#c2231b;font-weight:bold}"
        ".note{color:#666;font-size:12px}.variant{border-top:2px solid #ddd;margin-top:2em}"
        "code{background:#f4f4f4}</style></head><body>",
        f"<h1>copilot-opt regress: <span class='{'pass' if result.passed else 'fail'}'>"
        f"{_verdict_word(result)}</span></h1>",
        f"<p>Model <code>{esc(result.provenance.model)}</code> "
        f"(<code>{result.provenance.model_fingerprint[:16]}</code>), "
        f"{result.provenance.prompt_count} prompts; forward "
        f"{result.timing.forward_seconds}s, metrics {result.timing.metric_seconds}s.</p>",
        f"<p class='{'fail' if _weakened(result) else 'note'}'>{esc(gate_text(result))}</p>",
        "<table><tr><th>variant</th><th>positions</th>"
        + "".join(f"<th>{esc(k)}</th>" for k in summary_line(result.variants[0].summary))
        + "<th>result</th></tr>"
        if result.variants
        else "",
    ]
    for v in result.variants:
        cells = "".join(f"<td>{esc(x)}</td>" for x in summary_line(v.summary).values())
        status = (
            "<td class='pass'>pass</td>"
            if v.passed
            else f"<td class='fail'>FAIL: {esc('; '.join(v.failures))}</td>"
        )
        parts.append(
            f"<tr><td><code>{esc(v.name)}</code></td><td>{v.summary.positions}</td>"
            f"{cells}{status}</tr>"
        )
    parts.append("</table>")
    for v in result.variants:
        parts.extend(_variant_html(v))
    parts.append("</body></html>")
    return "\n".join(parts)


def _verdict_word(result: RegressResult) -> str:
    if result.partial is not None:
        return html.escape(f"PARTIAL ({result.partial})")
    return "PASS" if result.passed else "FAIL"


def _variant_html(v: VariantResult) -> list[str]:
    """One variant's section: KL histogram, worst prompts' KL lines, worst positions."""
    esc = html.escape
    parts: list[str] = []
    parts.append(
        f"<div class='variant'><h2>{esc(v.name)}</h2><p><code>{esc(v.spec)}</code>"
        f" on case set <code>{esc(v.case_set)}</code></p>"
    )
    parts.append("<h3>KL per position (log scale)</h3>" + _histogram_svg(v.kl_values))
    worst_prompts = sorted(v.prompt_kl.items(), key=lambda kv: -kv[1])[:3]
    parts.append("<h3>Per-position KL of the worst prompts</h3>")
    for case, mean in worst_prompts:
        parts.append(
            f"<p><code>{esc(case)}</code> mean KL {mean:.3g}</p>"
            + _line_svg(v.position_kl.get(case, []))
        )
    parts.append(
        "<h3>Worst positions</h3><table><tr><th>prompt</th><th>pos</th><th>KL</th>"
        "<th>context</th><th>base top</th><th>variant top</th></tr>"
    )
    for w in v.worst:
        parts.append(
            f"<tr><td>{esc(w.case)}</td><td>{w.position}</td>"
            f"<td>{_fmt(w.kl)}</td><td><code>{esc(w.context[-80:])}</code></td>"
            f"<td><code>{esc(repr(w.base_top))}</code></td>"
            f"<td><code>{esc(repr(w.variant_top))}</code></td></tr>"
        )
    parts.append("</table></div>")
    return parts
