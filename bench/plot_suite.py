"""Bar chart of the suite's speed-ups: Parhelion over PyTorch eager and over torch.compile, per
kernel and dtype (log scale, 1x marked).

    plot_suite.py ROWS.json OUT.png     (ROWS: the JSON rows of `parhelion bench --suite --json`)
"""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main():
    rows = json.load(open(sys.argv[1]))
    ms = {}
    for r in rows:
        ms[(r["kernel"], r["dtype"], r["impl"])] = r["median_ms"]
    cases = sorted({(r["kernel"], r["dtype"]) for r in rows})
    labels, eager, comp = [], [], []
    for k, d in cases:
        ours = ms.get((k, d, "parhelion"))
        if not ours:
            continue
        labels.append(f"{k}\n{d}")
        eager.append(ms.get((k, d, "eager"), 0) / ours)
        comp.append(ms.get((k, d, "compile"), 0) / ours)
    fig, ax = plt.subplots(figsize=(max(10, len(labels) * 0.6), 5))
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], eager, width=0.4, label="speed-up over eager")
    ax.bar([i + 0.2 for i in x], comp, width=0.4, label="speed-up over torch.compile")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, rotation=90, fontsize=7)
    ax.set_ylabel("time of baseline / time of Parhelion")
    ax.set_title("Parhelion vs PyTorch on this CPU (parhelion bench --suite)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
