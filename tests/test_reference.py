"""The committed reference tree stays small and holds no checkpoints."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MB = 30


def test_reference_tree_is_small_and_has_no_checkpoints():
    files = [p for p in (ROOT / "reference").rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files) / 2**20
    assert size < LIMIT_MB, f"reference/ is {size:.1f} MB, over {LIMIT_MB} MB"
    assert not [p for p in files if ".ckpt" in p.name], "checkpoints in reference/"
