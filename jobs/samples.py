"""Generated sample data: a sales fact table (parquet) and a product dimension (CSV).

Deterministic for a seed, so tests and the demo can compare against plain pandas.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

REGIONS = np.array(["north", "south", "east", "west", "test"])
CATEGORIES = np.array(["tools", "garden", "kitchen", "toys", "books", "sports"])


def sales_frame(rows: int, *, seed: int = 0, start_id: int = 0, products: int = 200) -> pd.DataFrame:
    """``rows`` sales: some refunds (amount ≤ 0), some rows in the 'test' region, some null discounts."""
    rng = np.random.default_rng(seed)
    discount = rng.choice([0.0, 0.05, 0.1, 0.2, 0.3], size=rows)
    discount = np.where(rng.random(rows) < 0.02, np.nan, discount)
    return pd.DataFrame(
        {
            "order_id": np.arange(start_id, start_id + rows, dtype="int64"),
            "ts": pd.Timestamp("2026-01-01") + pd.to_timedelta(rng.integers(0, 365 * 24 * 3600, rows), unit="s"),
            "region": pd.Series(REGIONS[rng.integers(0, len(REGIONS), rows)], dtype="string"),
            "customer_id": rng.integers(0, max(rows // 20, 1), rows, dtype="int64"),
            "product_id": rng.integers(0, products, rows, dtype="int64"),
            "quantity": rng.integers(1, 10, rows, dtype="int64"),
            "amount": np.round(rng.normal(50.0, 30.0, rows), 2),
            "discount": discount,
        }
    )


def products_frame(products: int = 200, *, seed: int = 1) -> pd.DataFrame:
    """The product dimension joined by ``product_id``."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "product_id": np.arange(products, dtype="int64"),
            "category": CATEGORIES[rng.integers(0, len(CATEGORIES), products)],
            "unit_cost": np.round(rng.uniform(1.0, 40.0, products), 2),
        }
    )


def write_sample_data(root: str | Path, *, rows: int = 1_000_000, files: int = 8, seed: int = 0) -> dict[str, Path]:
    """Write ``root/sales/part-*.parquet`` and ``root/products.csv``; returns their paths."""
    root = Path(root)
    sales_dir = root / "sales"
    sales_dir.mkdir(parents=True, exist_ok=True)
    per_file = -(-rows // files)
    for index in range(files):
        count = min(per_file, rows - index * per_file)
        if count <= 0:
            break
        frame = sales_frame(count, seed=seed + index, start_id=index * per_file)
        frame.to_parquet(sales_dir / f"part-{index:03d}.parquet", index=False)
    products = root / "products.csv"
    products_frame().to_csv(products, index=False)
    return {"sales": sales_dir, "products": products}
