"""Per-batch-size depth schedules: inclusive batch-size ranges with the depth each one drafts.

A schedule is [(lo, hi, k), ...]: it starts at batch size 1, ranges are contiguous and never
overlap, and k = 0 means no speculation for those batch sizes. The select job builds one from
the best depth measured at a few batch sizes; the engine emitters translate it.
"""

from __future__ import annotations

Range = tuple[int, int, int]  # (lowest batch size, highest batch size, depth), inclusive


def schedule_from_choices(choices: dict[int, int], max_batch_size: int) -> list[Range]:
    """{batch size measured: best depth} -> inclusive ranges covering 1..max_batch_size.

    A measured batch size B governs the sizes above the previous measured one up to B; sizes
    past the largest measured one keep its depth. Neighbouring ranges with one depth merge.
    """
    if not choices:
        raise ValueError("no depth choices to build a schedule from")
    sizes = sorted(choices)
    if sizes[0] < 1 or max_batch_size < sizes[0]:
        raise ValueError(f"batch sizes must be >= 1 and max_batch_size >= {sizes[0]}")
    ranges: list[Range] = []
    lo = 1
    for b in (b for b in sizes if b <= max_batch_size):
        ranges.append((lo, b, choices[b]))
        lo = b + 1
    if lo <= max_batch_size:  # past the largest measured size: keep its depth
        ranges[-1] = (ranges[-1][0], max_batch_size, ranges[-1][2])
    merged: list[Range] = []
    for r in ranges:
        if merged and merged[-1][2] == r[2]:
            merged[-1] = (merged[-1][0], r[1], r[2])
        else:
            merged.append(r)
    return merged


def check_schedule(schedule: list[Range]) -> None:
    if not schedule or schedule[0][0] != 1:
        raise ValueError("schedule: the first range must start at batch size 1")
    for (lo, hi, k), nxt in zip(schedule, schedule[1:] + [None]):
        if lo > hi or k < 0:
            raise ValueError(f"schedule: bad range {[lo, hi, k]}")
        if nxt is not None and nxt[0] != hi + 1:
            raise ValueError(f"schedule: ranges {[lo, hi, k]} and {list(nxt)} overlap or leave a gap")
