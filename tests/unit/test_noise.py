"""The best's lead over the runner-up: its standard error over seeds, Welch's t-test, "within noise", one order."""
import math

import pytest
from scipy import stats

from platform.results.noise import lead_over, per_seed_values, rank, range_in_stds


def test_a_lead_below_its_standard_error_is_within_noise():
    best, runner = [0.84, 0.82, 0.84], [0.83, 0.83, 0.82]
    lead = lead_over(best, runner, "max")
    assert lead.lead == pytest.approx(0.0066666, abs=1e-6)
    se = math.sqrt(stats.tvar(best) / 3 + stats.tvar(runner) / 3)
    assert lead.se == pytest.approx(se)
    assert lead.p == pytest.approx(stats.ttest_ind(best, runner, equal_var=False).pvalue)
    assert lead.within_noise and lead.text().endswith(": within noise")


def test_a_clear_lead_is_not_within_noise_and_min_metrics_lead_downwards():
    lead = lead_over([0.90, 0.91, 0.92], [0.80, 0.81, 0.79], "max")
    assert not lead.within_noise and lead.p < 0.001 and "beyond one standard error" in lead.text()
    loss = lead_over([0.30, 0.31, 0.29], [0.50, 0.52, 0.49], "min")
    assert loss.lead == pytest.approx(0.2033333, abs=1e-6) and not loss.within_noise


def test_one_seed_has_no_spread_and_is_said_so():
    lead = lead_over([0.9], [0.8], "max")
    assert lead.se is None and lead.within_noise and "one seed" in lead.text()
    assert lead_over([0.9], [], "max") is None


def test_exact_ties_are_within_noise():
    lead = lead_over([0.8287, 0.8287], [0.8287, 0.8287], "max")
    assert lead.lead == 0 and lead.se == 0 and lead.within_noise and lead.p == 1.0


def test_ties_break_by_std_then_by_trial_number():
    trials = [("c", 0.8, 0.02, 3), ("a", 0.8, 0.01, 5), ("b", 0.8, 0.01, 2), ("d", 0.9, 0.05, 9)]
    ranked = rank(trials, lambda t: t[1], lambda t: t[2], lambda t: t[3], "max")
    assert [t[0] for t in ranked] == ["d", "b", "a", "c"]
    assert [t[0] for t in rank(trials, lambda t: t[1], lambda t: t[2], lambda t: t[3], "min")] == ["b", "a", "c", "d"]


def test_per_seed_values_and_range_in_stds():
    metrics = {"val_accuracy": 0.5, "val_accuracy/seed_10": 0.6, "val_accuracy/seed_2": 0.4, "val_loss/seed_2": 9}
    assert per_seed_values(metrics, "val_accuracy") == [0.4, 0.6]  # seed order, numerically
    assert per_seed_values({"val_accuracy": 0.5}, "val_accuracy") == [0.5]
    assert range_in_stds([0.80, 0.84], [0.02, 0.02]) == pytest.approx(2.0)
    assert range_in_stds([0.8], [None]) is None


def test_a_clear_deficit_is_not_within_noise_either():
    """A claim compared the other way round (benchmarks' claim_verdict): a negative lead beyond its standard error
    is a difference, not noise."""
    lead = lead_over([0.62, 0.65, 0.58, 0.61, 0.57], [0.82, 0.89, 0.67, 0.67, 0.82], "max")
    assert lead.lead == pytest.approx(-0.168, abs=1e-3) and abs(lead.lead) > lead.se and not lead.within_noise
