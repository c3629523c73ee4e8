#!/usr/bin/python3
"""Draws a xylem training run's curves to a PNG: `xylem plot RUN_DIR` runs it (installed beside
xylem in share/xylem/). Needs only Python 3 and matplotlib (Debian: python3-matplotlib).

Reads RUN_DIR/log.csv (columns epoch,step,loss,images_per_second,elapsed_seconds,lr,val_loss,
val_accuracy,kind; "interval" rows every train.print_every steps, an "epoch" row closing each
epoch) and RUN_DIR/metrics.json (per-epoch entries; test_accuracy where the test set was scored).
Draws the training loss (interval rows and each epoch's mean), the validation loss and accuracy
when the run held out a validation set, the test accuracy points and the learning rate, over the
training steps of the whole run, with the epoch boundaries. Errors are one line on stderr, exit 1.
"""
import argparse
import csv
import io
import json
import math
import os
import sys

COLUMNS = ["epoch", "step", "loss", "images_per_second", "elapsed_seconds", "lr", "val_loss", "val_accuracy", "kind"]


class Failure(Exception):
    pass


def number(text, where):
    try:
        return float(text)
    except ValueError:
        raise Failure(f"{where}: '{text}' is not a number")


def read_log(path):
    """The log's rows as dicts; a resumed run appends rows it may already have logged, so the
    last row of each (kind, epoch, step) wins."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise Failure(f"{path}: cannot read: {e.strerror}")
    # xylem writes the log in UTF-8; anything else is damage, named by line and column.
    for line, raw in enumerate(data.split(b"\n"), start=1):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise Failure(f"{path}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1}): "
                          "the log is damaged; remove or fix that line")
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
    if not rows:
        raise Failure(f"{path}: is empty (the run has not logged anything yet)")
    header = rows[0]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise Failure(f"{path}: not a xylem training log (no column {', '.join(missing)})")
    col = {name: header.index(name) for name in COLUMNS}
    latest = {}
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise Failure(f"{path}:{line}: {len(row)} fields, the header has {len(header)}")
        where = f"{path}:{line}"
        r = {
            "kind": row[col["kind"]],
            "epoch": int(number(row[col["epoch"]], where)),
            "step": int(number(row[col["step"]], where)),
            "loss": number(row[col["loss"]], where),
            "lr": number(row[col["lr"]], where),
            "val_loss": number(row[col["val_loss"]], where) if row[col["val_loss"]] else None,
            "val_accuracy": number(row[col["val_accuracy"]], where) if row[col["val_accuracy"]] else None,
        }
        if r["kind"] not in ("interval", "epoch"):
            raise Failure(f"{where}: kind '{r['kind']}', expected interval or epoch")
        latest[(r["kind"], r["epoch"], r["step"])] = r
    if not latest:
        raise Failure(f"{path}: has no rows yet, only the header (the run logs every train.print_every steps)")
    return sorted(latest.values(), key=lambda r: (r["epoch"], r["step"], r["kind"] == "epoch"))


def read_metrics(path):
    """metrics.json's per-epoch entries by epoch, and the run's description; {} if there is none."""
    if not os.path.exists(path):
        return {}, {}
    try:
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
        return {int(e["epoch"]): e for e in m.get("epochs", [])}, m
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Failure(f"{path}: cannot read it: {e}")


def epoch_offsets(rows):
    """Steps before each epoch: an epoch's length is its epoch row's step count (a partial last
    epoch included), else (an epoch still running) its last logged step."""
    length = {}
    for r in rows:
        if r["kind"] == "epoch":
            length[r["epoch"]] = r["step"]
        else:
            length.setdefault(("interval", r["epoch"]), 0)
            length[("interval", r["epoch"])] = max(length[("interval", r["epoch"])], r["step"])
    epochs = sorted({r["epoch"] for r in rows})
    offsets, total = {}, 0
    for e in range(1, (epochs[-1] if epochs else 0) + 1):
        offsets[e] = total
        total += length.get(e, length.get(("interval", e), 0))
    return offsets, total


def plot(run_dir, out):
    log_path = os.path.join(run_dir, "log.csv")
    rows = read_log(log_path)
    per_epoch, metrics = read_metrics(os.path.join(run_dir, "metrics.json"))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError as e:
        raise Failure(f"xylem plot needs matplotlib for {sys.executable} ({e}); "
                      "Debian: apt-get install python3-matplotlib")

    offsets, total = epoch_offsets(rows)
    x = lambda r: offsets[r["epoch"]] + r["step"]
    intervals = [r for r in rows if r["kind"] == "interval"]
    epochs = [r for r in rows if r["kind"] == "epoch"]
    validated = [r for r in epochs if r["val_loss"] is not None]
    tested = [(offsets[e] + m.get("steps", 0), 100 * m["test_accuracy"], e)
              for e, m in sorted(per_epoch.items()) if "test_accuracy" in m and e in offsets]
    has_accuracy = bool(validated or tested)

    panels = 3 if has_accuracy else 2
    fig, axes = plt.subplots(panels, 1, sharex=True, figsize=(9, 2.6 * panels + 0.8),
                             gridspec_kw={"height_ratios": [3, 2, 1.4][:panels] if has_accuracy else [3, 1.4]})
    loss_ax, lr_ax = axes[0], axes[-1]
    acc_ax = axes[1] if has_accuracy else None

    if intervals:
        loss_ax.plot([x(r) for r in intervals], [r["loss"] for r in intervals], color="tab:blue", alpha=0.45,
                     linewidth=1, label=f"train loss (every {interval_width(intervals)} steps)")
    if epochs:
        loss_ax.plot([x(r) for r in epochs], [r["loss"] for r in epochs], "o-", color="tab:blue", linewidth=2,
                     markersize=5, label="train loss (epoch mean)")
    if validated:
        loss_ax.plot([x(r) for r in validated], [r["val_loss"] for r in validated], "s-", color="tab:orange",
                     linewidth=2, markersize=5, label="validation loss")
    # A text run's losses are per character (metrics.json says so); an image run's per image.
    per_char = metrics.get("loss_unit") == "nats per character"
    loss_ax.set_ylabel("loss (nats per character)" if per_char else "loss (mean per image)")
    finite = [v for r in rows for v in (r["loss"], r["val_loss"]) if v is not None and math.isfinite(v)]
    if finite:  # the whole range, unless a few huge values (a diverging step) would flatten the rest
        hi, p90 = max(finite), sorted(finite)[int(0.9 * (len(finite) - 1))]
        top = 5 * p90 if hi > 5 * p90 > 0 else hi * 1.05
        loss_ax.set_ylim(0, top if top > 0 else 1)
        if top < hi:
            loss_ax.text(0.01, 0.97, f"clipped at {top:.3g} (max {hi:.3g})", transform=loss_ax.transAxes,
                         va="top", fontsize=8, color="gray")

    if acc_ax is not None:
        if validated:
            acc_ax.plot([x(r) for r in validated], [100 * r["val_accuracy"] for r in validated], "s-",
                        color="tab:orange", linewidth=2, markersize=5,
                        label=f"validation accuracy (epoch {validated[-1]['epoch']}: {100 * validated[-1]['val_accuracy']:.2f}%)")
        if tested:
            acc_ax.plot([t[0] for t in tested], [t[1] for t in tested], "*", color="tab:green", markersize=13,
                        label=f"test accuracy (epoch {tested[-1][2]}: {tested[-1][1]:.2f}%)")
        acc_ax.set_ylabel("accuracy (%)")

    lr_rows = sorted(rows, key=lambda r: (x(r), r["kind"] == "epoch"))
    lr_ax.step([0] + [x(r) for r in lr_rows], [lr_rows[0]["lr"]] + [r["lr"] for r in lr_rows], where="pre",
               color="tab:purple", linewidth=1.5, label="learning rate")
    lr_ax.set_ylabel("learning rate")
    lr_ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    lr_ax.set_xlabel("training step (whole run)")
    lr_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    lr_ax.set_ylim(bottom=0)  # from zero, so a schedule's shape is not exaggerated
    lr_ax.set_xlim(0, max(total, 1) * 1.02)

    # Epoch boundaries on every panel; the epoch numbers above the first.
    ends = [offsets[e] for e in sorted(offsets) if e > 1] + [total]
    for ax in axes:
        for b in ends[:-1]:
            ax.axvline(b, color="gray", linestyle=":", linewidth=1)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(loc="best", fontsize=8, framealpha=0.85)
    labelled = sorted(offsets)
    every = max(1, math.ceil(len(labelled) / 12))
    top = loss_ax.secondary_xaxis("top")
    top.set_xticks([offsets[e] + (ends[i] - offsets[e]) / 2 for i, e in enumerate(labelled) if i % every == 0])
    top.set_xticklabels([f"epoch {e}" for i, e in enumerate(labelled) if i % every == 0], fontsize=8)
    top.tick_params(length=0)

    title = os.path.normpath(run_dir)
    details = [os.path.basename(metrics["config"]) if metrics.get("config") else None, metrics.get("backend"),
               f"batch {metrics['batch_size']}" if metrics.get("batch_size") else None]
    details = ", ".join(d for d in details if d)
    fig.suptitle(f"xylem run: {title}" + (f" ({details})" if details else ""), fontsize=11)
    if metrics.get("finished_early"):
        fig.text(0.5, 0.005, f"finished early: {metrics['finished_early']}", ha="center", fontsize=8, color="gray")
    fig.tight_layout()

    # Written atomically like every other file of a run: a temp file beside it, then a rename.
    temp = f"{out}.tmp.{os.getpid()}"
    try:
        fig.savefig(temp, format="png", dpi=110)
        os.replace(temp, out)
    except OSError as e:
        if os.path.exists(temp):
            os.remove(temp)
        raise Failure(f"{out}: cannot write: {e.strerror}")
    finally:
        plt.close(fig)


def interval_width(intervals):
    """The logging interval in steps (the most common gap between interval rows of one epoch)."""
    gaps = {}
    for a, b in zip(intervals, intervals[1:]):
        if a["epoch"] == b["epoch"]:
            gaps[b["step"] - a["step"]] = gaps.get(b["step"] - a["step"], 0) + 1
    return max(gaps, key=gaps.get) if gaps else intervals[0]["step"]


def main():
    parser = argparse.ArgumentParser(description="Draw a xylem run's curves to a PNG.")
    parser.add_argument("run_dir", help="a training run's out dir (holds log.csv, metrics.json)")
    parser.add_argument("--out", help="the PNG to write (default: RUN_DIR/curves.png)")
    args = parser.parse_args()
    try:
        if not os.path.isdir(args.run_dir):
            raise Failure(f"{args.run_dir}: no such run folder")
        plot(args.run_dir, args.out or os.path.join(args.run_dir, "curves.png"))
    except Failure as e:
        print(f"xylem: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # anything else is still one line, not a traceback
        print(f"xylem: error: plotting {args.run_dir} failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
