"""Pipeline timelines from Chrome traces: one row per stage, boxes coloured by category.

Reads what `infinipipe-plan --trace OUT.json` writes, and measured timelines in the same format:
complete events ("ph": "X", "ts"/"dur" in microseconds, "tid" = stage, "cat" = category).
Counter events (memory) and anything else are ignored, so they are optional.
"""

import json
import re

import matplotlib

matplotlib.use("Agg")  # no display on CI machines and servers
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COLOURS = {
    "forward": "#4c72b0",
    "backward": "#55a868",
    "recompute": "#c44e52",
    "weight": "#dd8452",  # zero bubble's W actions
    "head": "#937860",  # spread head's H actions
    "send": "#8172b2",
    "recv": "#ccb974",
}
OTHER = "#999999"
TRANSFERS = ("send", "recv")
STAGE_NAME = re.compile(r"stage (\d+)")
CHUNK_ID = re.compile(r"(\d+)\s*$")
# Of the time axis, per digit of a chunk id (5 pt digits on a ~12 inch axis): narrower boxes get
# no id. Boxes narrower than MIN_EDGE_FRACTION get no white edge, which would hide their colour.
LABEL_FRACTION_PER_DIGIT = 0.0045
MIN_EDGE_FRACTION = 0.002


def read_trace(path):
    with open(path) as f:
        return json.load(f)


def parse_events(trace):
    """Complete events as dicts (stage, cat, name, start_s, end_s), sorted by start.

    The simulator puts each stage's sends on an extra thread named "stage P send" (transfers
    overlap compute); thread names map such threads back to their stage. Without names the tid
    is the stage.
    """
    raw = trace["traceEvents"] if isinstance(trace, dict) else trace
    stage_of_tid = {}
    for e in raw:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            match = STAGE_NAME.match(str(e.get("args", {}).get("name", "")))
            if match:
                stage_of_tid[(e.get("pid", 0), e["tid"])] = int(match.group(1))
    events = []
    for e in raw:
        if e.get("ph") != "X":
            continue
        tid = e.get("tid", 0)
        stage = stage_of_tid.get((e.get("pid", 0), tid), tid)
        start = float(e["ts"]) / 1e6
        events.append(
            {
                "stage": int(stage),
                "cat": e.get("cat", ""),
                "name": str(e.get("name", "")),
                "start_s": start,
                "end_s": start + float(e.get("dur", 0)) / 1e6,
            }
        )
    events.sort(key=lambda ev: ev["start_s"])
    return events


def _draw(ax, events, t0, span):
    stages = sorted({e["stage"] for e in events})
    row = {s: i for i, s in enumerate(stages)}
    # One collection per (row, category): a step has tens of thousands of events.
    boxes = {}
    for e in events:
        y = row[e["stage"]]
        start, width = e["start_s"] - t0, e["end_s"] - e["start_s"]
        boxes.setdefault((y, e["cat"], width >= MIN_EDGE_FRACTION * span), []).append(
            (start, width)
        )
        chunk = CHUNK_ID.search(e["name"])
        if (
            e["cat"] not in TRANSFERS
            and chunk
            and width >= LABEL_FRACTION_PER_DIGIT * len(chunk.group(1)) * span
        ):
            ax.text(
                start + width / 2,
                y - 0.06,
                chunk.group(1),
                ha="center",
                va="center",
                fontsize=5,
                color="white",
                clip_on=True,
            )
    for (y, cat, wide), spans in boxes.items():
        colour = COLOURS.get(cat, OTHER)
        if cat in TRANSFERS:
            # A thin strip under the compute row: transfers run alongside compute.
            ax.broken_barh(spans, (y + 0.28, 0.12), facecolors=colour, linewidth=0)
        else:
            ax.broken_barh(
                spans,
                (y - 0.4, 0.68),
                facecolors=colour,
                edgecolor="white",
                linewidth=0.4 if wide else 0,
            )
    ax.set_yticks(range(len(stages)))
    ax.set_yticklabels(["stage %d" % s for s in stages])
    ax.set_ylim(len(stages) - 0.5, -0.5)  # stage 0 on top, as in the papers' figures
    return {e["cat"] for e in events}


def plot_timelines(traces, path):
    """Stack timelines (label, Chrome trace dict) on one figure with a shared time axis (s)."""
    parsed = [(label, parse_events(trace)) for label, trace in traces]
    for label, events in parsed:
        if not events:
            raise ValueError('%s: no complete ("ph": "X") events in the trace' % label)
    # Each timeline starts at its own first event, so steps recorded at different times line up.
    starts = [min(e["start_s"] for e in events) for _, events in parsed]
    span = max(max(e["end_s"] for e in events) - t0 for (_, events), t0 in zip(parsed, starts))
    heights = [max(1, len({e["stage"] for e in events})) for _, events in parsed]
    fig, axes = plt.subplots(
        len(parsed),
        1,
        sharex=True,
        squeeze=False,
        figsize=(14, 1.0 + 0.35 * sum(heights) + 0.4 * len(parsed)),
        gridspec_kw={"height_ratios": heights},
    )
    seen = set()
    for ax, (label, events), t0 in zip(axes[:, 0], parsed, starts):
        seen |= _draw(ax, events, t0, span)
        end = max(e["end_s"] for e in events) - t0
        ax.set_title("%s: %.3f s" % (label, end), loc="left", fontsize=10)
        ax.set_xlim(0, span * 1.01)
    axes[-1, 0].set_xlabel("time (s)")
    order = [c for c in COLOURS if c in seen] + sorted(seen - set(COLOURS))
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.legend(
        handles=[Patch(color=COLOURS.get(c, OTHER), label=c or "(none)") for c in order],
        loc="upper center",
        ncol=len(order),
        fontsize=8,
        frameon=False,
    )
    fig.savefig(path, dpi=150)
    plt.close(fig)
