"""The `make demo` job, shortened: it must train all four models and write its table and plot."""

import re

from gpflow_tight.__main__ import main


def test_demo_writes_table_and_plot(tmp_path, capsys):
    main(
        ["demo", "--output", str(tmp_path), "--quick", "--no-progress", "--data-dir", str(tmp_path)]
    )
    printed = capsys.readouterr().out
    assert "generated" in printed  # tmp_path holds no data: the demo falls back to generated data
    rows = {m: line for line in printed.splitlines() for m in re.findall(r"^\| (\w+) \|", line)}
    assert set(rows) >= {"SGPR", "TightSGPR", "SVGP", "TightSVGP"}
    bounds = {m: float(rows[m].split("|")[2]) for m in ("SGPR", "TightSGPR")}
    assert bounds["TightSGPR"] > bounds["SGPR"]
    assert (tmp_path / "demo_fits.png").stat().st_size > 10_000
    assert (tmp_path / "demo_results.md").read_text().count("|") > 20
