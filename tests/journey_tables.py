"""Tables of the kinds users bring, generated: the journey tests train, export, predict and serve them.

- ``gems``: a long-tailed price (a regression target) from a size, three graded categories and
  dimensions; a few cells 40 standard deviations out, rows of zeros in the three dimensions, empty cells.
- ``census``: text, number and yes/no columns with empty cells, a three-class text target.
- ``skewed``: a yes/no target with a 10:1 class split.
- ``numbers``: an all-number table with an integer class target.

Each generator returns the header and the rows as text cells, as a CSV holds them; ``write_csv`` writes one.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

CUTS = ("Fair", "Good", "Very Good", "Premium", "Ideal")
COLOURS = ("D", "E", "F", "G", "H", "I", "J")
CLARITIES = ("I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF")
ISLANDS = ("Biscoe", "Dream", "Torgersen")


def write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def _blank(rng: np.random.Generator, cells: list[list[Any]], columns: list[int], share: float) -> None:
    for row in cells:
        for j in columns:
            if rng.random() < share:
                row[j] = ""


def gems(n: int, seed: int = 0) -> tuple[list[str], list[list[Any]]]:
    """carat, cut, colour, clarity, depth, table, x, y, z -> price (long-tailed, 300 to ~20,000)."""
    rng = np.random.default_rng(seed)
    carat = np.clip(rng.lognormal(-0.45, 0.5, n), 0.2, 3.0)
    cut = rng.choice(len(CUTS), n, p=[0.03, 0.09, 0.22, 0.26, 0.40])
    colour = rng.choice(len(COLOURS), n)
    clarity = rng.choice(len(CLARITIES), n, p=[0.02, 0.17, 0.24, 0.23, 0.15, 0.09, 0.07, 0.03])
    depth = rng.normal(61.7, 1.4, n)
    table = rng.normal(57.4, 2.2, n)
    x = 6.45 * carat ** (1 / 3) + rng.normal(0, 0.05, n)
    y = x + rng.normal(0, 0.05, n)
    z = 0.618 * x + rng.normal(0, 0.03, n)
    log_price = (
        7.75
        + 1.7 * np.log(carat)
        + 0.05 * cut
        - 0.07 * colour
        + 0.09 * clarity
        - 0.02 * np.abs(depth - 61.7)
        + rng.normal(0, 0.12, n)
    )
    price = np.exp(log_price)
    # what real exports hold: a few typing errors far out, rows whose dimensions were never measured
    out = rng.random(n) < 0.002
    depth = np.where(out, 61.7 + 40 * 1.4, depth)
    table = np.where(rng.random(n) < 0.002, 57.4 + 40 * 2.2, table)
    zeros = rng.random(n) < 0.003
    x, y, z = (np.where(zeros, 0.0, v) for v in (x, y, z))
    rows = [
        [
            f"{carat[i]:.2f}",
            CUTS[cut[i]],
            COLOURS[colour[i]],
            CLARITIES[clarity[i]],
            f"{depth[i]:.1f}",
            f"{table[i]:.1f}",
            f"{x[i]:.2f}",
            f"{y[i]:.2f}",
            f"{z[i]:.2f}",
            f"{price[i]:.0f}",
        ]
        for i in range(n)
    ]
    _blank(rng, rows, [4, 5], 0.02)
    return ["carat", "cut", "color", "clarity", "depth", "table", "x", "y", "z", "price"], rows


def census(n: int, seed: int = 0) -> tuple[list[str], list[list[Any]]]:
    """id, island (text), bill_length_mm, flipper_length_mm, body_mass_g (numbers), sex (text), adult (yes/no)
    -> species (three text classes); about 5% empty cells."""
    rng = np.random.default_rng(seed)
    species = rng.choice(3, n, p=[0.45, 0.2, 0.35])
    island = np.where(species == 2, 0, np.where(species == 1, 1, rng.choice(3, n)))
    flip = rng.random(n) < 0.15
    island = np.where(flip, rng.choice(3, n), island)
    bill = np.array([38.8, 48.8, 47.5])[species] + rng.normal(0, 2.6, n)
    flipper = np.array([190.0, 196.0, 217.0])[species] + rng.normal(0, 6.5, n)
    male = rng.random(n) < 0.5
    mass = np.array([3700.0, 3730.0, 5070.0])[species] + np.where(male, 300.0, -300.0) + rng.normal(0, 350, n)
    adult = rng.random(n) < 0.8
    names = ("Adelie", "Chinstrap", "Gentoo")
    rows = [
        [
            f"p{i:06d}",
            ISLANDS[island[i]],
            f"{bill[i]:.1f}",
            f"{flipper[i]:.0f}",
            f"{mass[i]:.0f}",
            "male" if male[i] else "female",
            "yes" if adult[i] else "no",
            names[species[i]],
        ]
        for i in range(n)
    ]
    _blank(rng, rows, [1, 2, 3, 4, 5, 6], 0.05)
    return ["id", "island", "bill_length_mm", "flipper_length_mm", "body_mass_g", "sex", "adult", "species"], rows


def skewed(n: int, seed: int = 0) -> tuple[list[str], list[list[Any]]]:
    """age, plan (text), visits, paying (yes/no) -> churned (yes/no), about one yes in eleven."""
    rng = np.random.default_rng(seed)
    age = rng.normal(45, 14, n)
    plan = rng.choice(3, n, p=[0.5, 0.3, 0.2])
    visits = rng.poisson(6, n)
    paying = rng.random(n) < 0.6
    score = -0.08 * visits + 0.9 * (plan == 0) - 0.7 * paying + 0.02 * (age - 45) + rng.normal(0, 0.7, n)
    churned = score > np.quantile(score, 1 - 1 / 11)
    rows = [
        [
            f"{age[i]:.0f}",
            ("basic", "plus", "pro")[plan[i]],
            str(visits[i]),
            "yes" if paying[i] else "no",
            "yes" if churned[i] else "no",
        ]
        for i in range(n)
    ]
    _blank(rng, rows, [0, 1], 0.03)
    return ["age", "plan", "visits", "paying", "churned"], rows


def numbers(n: int, seed: int = 0, features: int = 8) -> tuple[list[str], list[list[Any]]]:
    """f0..f7 (numbers) -> label (0, 1, 2)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (n, features))
    w = rng.normal(0, 1, (features, 3))
    label = np.argmax(x @ w + rng.normal(0, 0.8, (n, 3)), axis=1)
    rows = [[f"{v:.4f}" for v in x[i]] + [str(label[i])] for i in range(n)]
    return [f"f{j}" for j in range(features)] + ["label"], rows


FILLER = tuple("the a of to and in is it for on with as at by from this that my your order item box parcel".split())
TICKET_WORDS = {1: ("refund", "broken", "cancel", "missing"), 0: ("thanks", "great", "love", "perfect")}


def tickets(n: int, seed: int = 0) -> tuple[list[str], list[list[Any]]]:
    """amount, message (free text), sent (an ISO timestamp) -> urgent (yes/no). Half the rows say it in a word of
    the message (their hour in neither class's band), half by the hour they were sent (their message neutral):
    each column alone gets about three rows in four, both together nearly all."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        label = int(rng.integers(2))
        words = [str(w) for w in rng.choice(FILLER, int(rng.integers(4, 10)))]
        if rng.random() < 0.5:
            words.insert(int(rng.integers(len(words))), str(rng.choice(TICKET_WORDS[label])))
            hour = int(rng.integers(17, 21))
        else:
            hour = int(rng.integers(8, 16)) if label else int(rng.choice([0, 1, 2, 3, 4, 5, 21, 22, 23]))
        sent = f"2024-{rng.integers(1, 13):02d}-{rng.integers(1, 29):02d}T{hour:02d}:{rng.integers(60):02d}:00"
        rows.append([f"{rng.normal(50, 20):.2f}", " ".join(words), sent, "yes" if label else "no"])
    _blank(rng, rows, [0, 1, 2], 0.02)
    return ["amount", "message", "sent", "urgent"], rows
