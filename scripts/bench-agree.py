#!/usr/bin/env python3
"""Whether two runs of `weft bench --json` agree: for every row from `--from` bytes up (4 KB
unless given), each contender's median (weft_us, nccl_us, nccl_windows_us, versus_us) of one
run against the other's, as a percentage of the smaller. Prints a table of both medians, their
difference and each run's spread ((max - min) / median), then the worst row; exits non-zero if
a row differs by more than `--tolerance` percent (5 unless given).

    weft bench allreduce -b 1K -e 1G --graph --nccl --json a.json
    weft bench allreduce -b 1K -e 1G --graph --nccl --json b.json
    scripts/bench-agree.py a.json b.json
"""

import argparse
import json
import sys

CONTENDERS = ("weft", "nccl", "nccl_windows", "versus")


def size(text):
    """Bytes of `4K`, `1M`, `1G` or a plain number."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)


def spread(row, name):
    """A contender's (max - min) / median in percent, or None without min and max."""
    median, low, high = (row.get(f"{name}{k}_us") for k in ("", "_min", "_max"))
    return None if None in (median, low, high) else (high - low) / median * 100


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs=2, help="two JSON files of `weft bench --json`")
    parser.add_argument("--from", dest="smallest", type=size, default=4096, help="smallest row compared (4K)")
    parser.add_argument("--tolerance", type=float, default=5.0, help="largest difference in percent (5)")
    args = parser.parse_args()
    runs = [json.load(open(path))["rows"] for path in args.runs]
    worst = (0.0, None, None)
    print(f"{'bytes':>12} {'contender':>12} {'run 1 us':>10} {'run 2 us':>10} {'diff %':>7} {'spreads %':>14}")
    for first, second in zip(*runs):
        if first["bytes"] != second["bytes"]:
            sys.exit(f"the runs' rows differ: {first['bytes']} against {second['bytes']} bytes")
        for name in CONTENDERS:
            a, b = first.get(f"{name}_us"), second.get(f"{name}_us")
            if a is None or b is None:
                continue
            diff = abs(a - b) / min(a, b) * 100
            compared = first["bytes"] >= args.smallest
            if compared and diff > worst[0]:
                worst = (diff, first["bytes"], name)
            spreads = "/".join("-" if s is None else f"{s:.1f}" for s in (spread(first, name), spread(second, name)))
            print(f"{first['bytes']:>12} {name:>12} {a:>10.2f} {b:>10.2f} {diff:>6.1f}{'' if compared else '*'} {spreads:>14}")
    if len(runs[0]) != len(runs[1]):
        sys.exit("the runs have different numbers of rows")
    diff, at, name = worst
    print(f"# worst from {args.smallest} bytes: {diff:.1f}% ({name} at {at} bytes); tolerance {args.tolerance}%"
          + " (* : below the smallest compared row)")
    return 0 if diff <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
