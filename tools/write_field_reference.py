"""Write docs/scenario-fields.md, the scenario's field reference, from the schema.

    python tools/write_field_reference.py

tests/test_field_reference.py fails when the file no longer matches the schema, so run this
after adding or describing a scenario field.
"""

from __future__ import annotations

from pathlib import Path

from simcluster.field_reference import field_docs, markdown
from simcluster.output.atomic import atomic_write_text

ROOT = Path(__file__).resolve().parent.parent
PATH = ROOT / "docs" / "scenario-fields.md"


def main() -> None:
    atomic_write_text(PATH, markdown(field_docs()))
    print(f"wrote {PATH.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
