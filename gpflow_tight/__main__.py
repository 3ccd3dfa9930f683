"""Command line: ``python -m gpflow_tight demo`` (see ``--help``)."""

import argparse
import os
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gpflow_tight", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="SGPR vs TightSGPR and SVGP vs TightSVGP on Snelson's 1-D data"
    )
    demo.add_argument("--output", type=Path, default=Path("demo_output"))
    demo.add_argument("--data-dir", default=None, help="folder holding snelson/ (optional)")
    demo.add_argument("--quick", action="store_true", help="a tenth of the iterations")
    demo.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    args = parser.parse_args(argv)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from . import demo as demo_module

    print(
        demo_module.main(
            args.output, data_dir=args.data_dir, quick=args.quick, progress=not args.no_progress
        )
    )


if __name__ == "__main__":
    main()
