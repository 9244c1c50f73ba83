"""The training curve of a munuibot checkpoint as a small SVG, for the model card.

    python -m engine.training.loss_plot engine/models/munuibot-tiny/training_log.json docs/munuibot-loss.svg

Plain SVG written by hand (no plotting library in the project's dependencies): the logged loss
per step on a log scale, the held-out loss as a dashed line, axes labelled, and a <title>/<desc>
so a screen reader says what the picture shows.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

W, H, LEFT, RIGHT, TOP, BOTTOM = 640, 300, 56, 16, 28, 40


def svg(log: dict) -> str:
    curve = log["loss_curve"]
    steps = max(s for s, _ in curve) or 1
    losses = [v for _, v in curve] + ([log["eval_loss"]] if log.get("eval_loss") else [])
    lo, hi = math.log10(min(losses)) - 0.05, math.log10(max(losses)) + 0.05

    def x(step: float) -> float:
        return LEFT + (W - LEFT - RIGHT) * step / steps

    def y(loss: float) -> float:
        return TOP + (H - TOP - BOTTOM) * (hi - math.log10(loss)) / (hi - lo)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" role="img" '
           f'aria-labelledby="t d" font-family="sans-serif" font-size="12">',
           f'<title id="t">{log["model"]}: training loss by step</title>',
           f'<desc id="d">Loss on the answer tokens, log scale, from {curve[0][1]} at step 0 to '
           f'{log["final_loss"]} at step {steps}; held-out loss {log.get("eval_loss")}.</desc>',
           f'<rect width="{W}" height="{H}" fill="white"/>']
    for decade in range(math.floor(lo), math.ceil(hi) + 1):
        for m in (1, 2, 5):
            v = m * 10 ** decade
            if lo <= math.log10(v) <= hi:
                out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
                out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    tick = max(1, round(steps / 5, -2) or round(steps / 5))
    for s in range(0, steps + 1, int(tick)):
        out.append(f'<text x="{x(s):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{s:.0f}</text>')
    out.append(f'<text x="{(W + LEFT) / 2}" y="{H - 6}" text-anchor="middle">step</text>')
    out.append(f'<text x="14" y="{(H + TOP) / 2}" transform="rotate(-90 14 {(H + TOP) / 2})" '
               f'text-anchor="middle">loss (log scale)</text>')
    points = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in curve)
    out.append(f'<polyline points="{points}" fill="none" stroke="#1f5fa8" stroke-width="2"/>')
    if log.get("eval_loss"):
        e = y(log["eval_loss"])
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{e:.1f}" y2="{e:.1f}" stroke="#b3471d" '
                   f'stroke-dasharray="6 4"/>')
        out.append(f'<text x="{W - RIGHT}" y="{e + 14:.1f}" text-anchor="end" fill="#b3471d">'
                   f'held-out {log["eval_loss"]}</text>')
    out.append(f'<text x="{LEFT}" y="16">{log["model"]}: {log["parameters"]:,} parameters, '
               f'{log["steps"]} steps, {log["train_seconds"]:.0f} s on {log["threads"]} threads</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    log = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    Path(args[1]).write_text(svg(log), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
