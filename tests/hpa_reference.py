"""Plain single-process Apriori, the reference that ``vb-hpa`` is checked against.

Deliberately simple: sets and dicts, ``itertools.combinations``, no pruning tricks
beyond the textbook ones.  Fine for a few thousand transactions.

Input: the files ``PREFIX.0``, ``PREFIX.1``, ... (as many as exist), one
transaction per line, item ids separated by blanks; a blank line is an empty
transaction.  Output formats match ``vb-hpa --itemsets-out`` / ``--rules-out``:

    itemsets: ``count: i1 i2 ...``  by length, then lexicographically (numeric ids)
    rules:    ``count(X) confidence: a1 .. => c1 ..`` for every frequent X and every
              non-empty proper antecedent A (by size, then lexicographically)
              with count(X) / count(A) >= confidence; confidence printed ``%.6f``.

Usage: python3 tests/hpa_reference.py --input PREFIX --support S
           [--confidence C] [--itemsets-out FILE] [--rules-out FILE]
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys


def read_transactions(prefix: str) -> list[frozenset[int]]:
    transactions: list[frozenset[int]] = []
    part = 0
    while os.path.exists(f"{prefix}.{part}"):
        with open(f"{prefix}.{part}", "rb") as f:
            lines = f.read().split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()  # the text after the final newline is not a line
        for line in lines:
            transactions.append(frozenset(int(tok) for tok in line.split()))
        part += 1
    if part == 0:
        raise FileNotFoundError(f"{prefix}.0")
    return transactions


def min_count_for(support: float, n_transactions: int) -> int:
    # ceil(S * D), tolerant of floating-point noise such as 0.07 * 100 = 7.000000000000001
    return max(1, math.ceil(support * n_transactions - 1e-9))


def apriori(transactions: list[frozenset[int]], min_count: int) -> dict[tuple[int, ...], int]:
    """All frequent itemsets (sorted tuples) with their support counts."""
    counts: dict[tuple[int, ...], int] = {}
    for t in transactions:
        for item in t:
            counts[(item,)] = counts.get((item,), 0) + 1
    level = {s: c for s, c in counts.items() if c >= min_count}
    frequent = dict(level)
    k = 2
    while level:
        # join: two frequent (k-1)-itemsets that differ only in their last item
        previous = sorted(level)
        candidates = set()
        for a, b in itertools.combinations(previous, 2):
            if a[:-1] == b[:-1]:
                c = a + (b[-1],) if a[-1] < b[-1] else b + (a[-1],)
                # prune: every (k-1)-subset must be frequent
                if all(s in level for s in itertools.combinations(c, k - 1)):
                    candidates.add(c)
        if not candidates:
            break
        items = {i for c in candidates for i in c}
        counts = dict.fromkeys(candidates, 0)
        for t in transactions:
            for s in itertools.combinations(sorted(t & items), k):
                if s in counts:
                    counts[s] += 1
        level = {s: c for s, c in counts.items() if c >= min_count}
        frequent.update(level)
        k += 1
    return frequent


def canonical(itemsets) -> list[tuple[int, ...]]:
    return sorted(itemsets, key=lambda s: (len(s), s))


def itemset_lines(frequent: dict[tuple[int, ...], int]) -> list[str]:
    return [f"{frequent[s]}: " + " ".join(map(str, s)) for s in canonical(frequent)]


def rule_lines(frequent: dict[tuple[int, ...], int], confidence: float) -> list[str]:
    lines = []
    for x in canonical(frequent):
        if len(x) < 2:
            continue
        cx = frequent[x]
        for size in range(1, len(x)):
            for a in itertools.combinations(x, size):
                conf = cx / frequent[a]
                if conf >= confidence:
                    rest = [i for i in x if i not in a]
                    lines.append(f"{cx} {conf:.6f}: " + " ".join(map(str, a)) + " => "
                                 + " ".join(map(str, rest)))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", required=True)
    p.add_argument("--support", type=float, required=True)
    p.add_argument("--confidence", type=float, default=0.5)
    p.add_argument("--itemsets-out")
    p.add_argument("--rules-out")
    args = p.parse_args(argv)
    if not 0 < args.support <= 1:
        print("hpa_reference: --support must be in (0, 1]", file=sys.stderr)
        return 2
    transactions = read_transactions(args.input)
    min_count = min_count_for(args.support, len(transactions))
    frequent = apriori(transactions, min_count)
    rules = rule_lines(frequent, args.confidence)
    if args.itemsets_out:
        with open(args.itemsets_out, "w") as f:
            f.writelines(line + "\n" for line in itemset_lines(frequent))
    if args.rules_out:
        with open(args.rules_out, "w") as f:
            f.writelines(line + "\n" for line in rules)
    print(f"transactions={len(transactions)} min_count={min_count} "
          f"frequent_itemsets={len(frequent)} rules={len(rules)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
