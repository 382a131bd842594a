"""``python -m sglang_rvv.compat``: the table of what sglang-rvv patches, as Markdown, and
what this process activated."""

from __future__ import annotations

import argparse
import sys

from sglang_rvv import compat


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_rvv.compat", description=__doc__)
    parser.add_argument("--riscv64-only", action="store_true", help="only the riscv64 rows")
    parser.add_argument(
        "--quiet", action="store_true", help="the quieted SGLang messages instead of the patches"
    )
    args = parser.parse_args()
    if args.quiet:
        sys.stdout.write(compat.quiet_table())
        return 0
    sys.stdout.write(compat.markdown_table(riscv64_only=args.riscv64_only))
    rows = "on" if compat.riscv64() else "off"
    print(f"\nactive in this process (riscv64 rows {rows}):")
    for patched, why in compat.ACTIVE.items():
        print(f"- {patched}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
