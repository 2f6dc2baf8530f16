"""experiments/ladder_report.py: the page shows every figure and the summary's own numbers."""

import base64
import html
import re

from experiments import ladder_report, scaling_fit
from experiments.ladder import report_html
from tests.test_scaling_fit import ladder_points, noisy


def test_page_has_the_figures_and_the_numbers_of_the_summary():
    points = ladder_points()
    summary = scaling_fit.summarize(points, budgets=[1e21, 3e23], samples=10)
    page = ladder_report.render(summary, points, "Ladder <test>")
    images = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    # loss against FLOPs, the law, the IsoFLOP curves, the frontier and the forecast
    assert len(images) == 5 and all(base64.b64decode(image).startswith(b"\x89PNG") for image in images)
    assert "Ladder &lt;test&gt;" in page and "not in this ladder" not in page
    assert f"{summary['law']['alpha']:.4g}" in page and f"{summary['law']['beta']:.4g}" in page
    low, high = summary["intervals"]["alpha"]
    assert f"[{low:.4g}, {high:.4g}]" in page
    (forecast,) = summary["forecast"]
    assert f"{forecast['predicted']:.4f}" in page and f"{forecast['relative_error']:+.2%}" in page
    for row in summary["budgets"]:
        assert f"{row['flops']:.3g}" in page and f"{row['params']:.4g}" in page and f"{row['loss']:.4f}" in page
    assert f"{summary['disagreement']['a_difference']:+.4f}" in page
    assert html.escape(summary["note"]) in page and "not identified" not in page


def test_a_law_not_identified_is_said_in_one_line_and_its_budgets_are_marked_as_no_answer():
    points = [dict(p, val_loss=float(noisy(3.0, 0.01, i))) for i, p in enumerate(ladder_points())]  # noise, no law
    summary = scaling_fit.summarize(points, budgets=[1e21], samples=10)
    page = ladder_report.render(summary, points, "ladder")
    verdict = html.escape(scaling_fit.not_identified(summary["identification"]))
    assert page.count(verdict) == 1 and verdict.startswith("not identified: ")
    numbers = summary["budgets"][0]["unidentified_law_numbers"]
    assert "1e+21 (not an answer: law not identified)" in page and f"{numbers['params']:.4g}" in page
    # fit.json: no compute-optimal split or frontier at its top level; the page withholds them
    for entry in (summary["compute_optimal"], summary["frontier"]):
        assert entry["identified"] is False and set(entry) == {"identified", "unidentified_law_numbers"}
    assert "tokens per parameter, 95% interval" not in page and "Compute-optimal split: not given" in page
    assert page.count("data:image/png") == 4 and "not drawn: the law is not identified" in page
    forecast = {"run": "holdout-4.0e12-w40", "written_at": "2026-12-05T10:00:00Z", "fitted_on": ["r0"], "params": 101880,
                "count": "total", "tokens": 5945344, "flops": 4e12, "predicted_loss": 3.8301, "interval": [3.3, 3.9],
                "measured_loss": 3.8124, "relative_error": 0.0046, "identification": summary["identification"]}  # fmt: skip
    page = report_html({"count": "total", "mixture": "m.yaml", "fits": {"total": summary}, "forecast": forecast, "rungs": points})
    assert f"relative error +0.46%; the law it was made from is {verdict}.</p>" in page


def test_page_without_isoflop_groups_or_held_out_rungs_says_so():
    points = [dict(p, held_out=False) for p in ladder_points()]
    summary = scaling_fit.summarize(points, samples=4)
    summary["approach2"] = {"groups": [], "why": "0 compute group(s) with >= 3 sizes bracket their minimum"}
    summary["disagreement"] = {"why": summary["approach2"]["why"]}
    page = ladder_report.render(summary, points, "ladder")
    assert page.count("data:image/png") == 3 and page.count("not in this ladder") == 2
    assert "Approach 2 (IsoFLOP parabolas) not fitted: 0 compute group(s)" in page
