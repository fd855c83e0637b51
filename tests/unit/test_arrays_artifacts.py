"""The arrays channel (``Algorithm.report_arrays``): which rounds, what travels, and the PNG/CSV artifacts written."""
import warnings

import numpy as np
import pytest
import torch

from platform.preflight import load_experiment
from platform.errors import ConfigError
from platform.config.run_schema import MAX_ARRAY_ELEMENTS, RESULT_ARRAYS
from platform.runtime.actors import arrays_due, plottable_arrays


def test_write_array_artifacts_writes_a_csv_that_reads_back_exactly_and_a_heatmap_png(tmp_path):
    from PIL import Image

    from platform.results.tracking import write_array_artifacts

    array = np.array([[0.1, 0.2, 0.7], [1 / 3, 1 / 3, 1 / 3], [0.0, -1e-12, 1e6]])
    written = write_array_artifacts("coefficients", array.tolist(), 5, str(tmp_path))
    assert written == [str(tmp_path / "coefficients" / "round_5.csv"), str(tmp_path / "coefficients" / "round_5.png")]
    csv = (tmp_path / "coefficients" / "round_5.csv").read_text()
    assert len(csv.strip().splitlines()) == 3 and all(len(line.split(",")) == 3 for line in csv.strip().splitlines())
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "coefficients" / "round_5.csv", delimiter=",", ndmin=2),
                                  array)  # float64 round trip, rows are lines
    with Image.open(tmp_path / "coefficients" / "round_5.png") as image:
        assert image.format == "PNG" and image.size[0] > 100 and image.size[1] > 100
        pixels = np.asarray(image.convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 20  # a drawn heat-map and colour bar, not a blank canvas

    # one row, one column, a wide matrix: all written
    for shape in ((1, 4), (4, 1), (2, 40)):
        name = f"m{shape[0]}x{shape[1]}"
        write_array_artifacts(name, np.ones(shape), 1, str(tmp_path))
        assert np.loadtxt(tmp_path / name / "round_1.csv", delimiter=",", ndmin=2).shape == shape
        assert (tmp_path / name / "round_1.png").stat().st_size > 0
    for bad in (np.ones(3), np.ones((2, 2, 2)), np.ones((0, 3))):
        with pytest.raises(ValueError, match="must be 2-D"):
            write_array_artifacts("bad", bad, 1, str(tmp_path))


def test_heatmap_title_and_generic_axis_labels(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from platform.results.tracking import array_heatmap

    seen = {}
    save = Figure.savefig

    def spy(fig, *args, **kwargs):
        ax = fig.axes[0]
        seen.update(title=ax.get_title(), x=ax.get_xlabel(), y=ax.get_ylabel(), axes=len(fig.axes))
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    array_heatmap(np.eye(3), str(tmp_path / "c.png"), "coefficients, round 2")
    assert seen == {"title": "coefficients, round 2", "x": "column", "y": "row", "axes": 2}  # 2: the colour bar


def test_arrays_are_due_every_few_rounds_and_after_the_last():
    assert [r for r in range(1, 13) if arrays_due(r, 5, 12)] == [5, 10, 12]
    assert [r for r in range(1, 11) if arrays_due(r, 5, 10)] == [5, 10]
    assert [r for r in range(1, 4) if arrays_due(r, 0, 3)] == [3]  # 0: after the last round only
    assert [r for r in range(1, 4) if arrays_due(r, 1, 3)] == [1, 2, 3]


def test_plottable_arrays_are_nested_float_lists_and_oversized_ones_are_skipped_with_one_warning():
    skipped: set = set()
    c = torch.tensor([[0.5, 0.25], [0.5, 0.75]], dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning for good arrays
        out = plottable_arrays({"coefficients": c, "row": np.arange(3), "odd name/x": torch.ones(1, 1)}, skipped)
    assert out == {"coefficients": [[0.5, 0.25], [0.5, 0.75]], "row": [[0.0, 1.0, 2.0]], "odd_name_x": [[1.0]]}
    assert all(isinstance(v, float) for row in out["coefficients"] for v in row)

    big = torch.zeros(MAX_ARRAY_ELEMENTS + 1, 1)
    with pytest.warns(RuntimeWarning, match="is not logged") as caught:
        assert plottable_arrays({"big": big, "cube": torch.zeros(2, 2, 2), "ok": torch.eye(2)}, skipped) == {
            "ok": [[1.0, 0.0], [0.0, 1.0]]}
    assert [str(w.message) for w in caught] == [
        "report_arrays: 'big' is not logged: it has 1000001 elements, more than 1000000",
        "report_arrays: 'cube' is not logged: its shape (2, 2, 2) is not that of a non-empty 1-D or 2-D array"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same names again: skipped silently (one warning per name)
        assert plottable_arrays({"big": big, "cube": torch.zeros(2, 2, 2)}, skipped) == {}
    assert plottable_arrays({}, skipped) == {}


def test_arrays_are_not_metrics_and_travel_with_the_first_seed():
    from platform.runtime.trial import summarise_seeds
    from platform.results.tracking import round_metrics

    per_seed = [{"round": 2, "val_accuracy": 0.5, RESULT_ARRAYS: {"c": [[1.0]]}},
                {"round": 2, "val_accuracy": 0.7, RESULT_ARRAYS: {"c": [[2.0]]}}]
    summary = summarise_seeds(per_seed)
    assert summary[RESULT_ARRAYS] == {"c": [[1.0]]}
    assert summary["val_accuracy"] == pytest.approx(0.6) and "val_accuracy_std" in summary
    assert RESULT_ARRAYS not in summarise_seeds([{"round": 1, "val_accuracy": 0.5}])
    assert round_metrics({**summary, "training_iteration": 2}) == {"val_accuracy": pytest.approx(0.6),
                                                                    "val_accuracy_std": pytest.approx(0.1)}


def test_tune_sees_only_the_selection_numbers_and_mlflow_gets_every_metric():
    """A trial reports to Tune as numbers only round, the search metrics and the test figures (Tune keeps statistics
    of every numeric key of every trial for the whole sweep); the callback still logs every metric."""
    import math

    from platform.config.run_schema import RESULT_DETAILS, tune_result
    from platform.results.tracking import round_metrics

    metrics = {"round": 3, "val_accuracy": 0.6, "val_accuracy_std": 0.1, "test_accuracy": 0.55, "train_loss": 1.5,
               "val_accuracy/seed_0": 0.5, "round_seconds": 0.2, "client_val_accuracy": float("nan"),
               RESULT_ARRAYS: {"c": [[1.0]]}}
    reported = tune_result(metrics, ("round", "val_accuracy", "test_accuracy", "test_loss"))
    numbers = {k for k, v in reported.items() if isinstance(v, (int, float))}
    assert numbers == {"round", "val_accuracy", "val_accuracy_std", "test_accuracy"}
    assert isinstance(reported[RESULT_DETAILS], str) and reported[RESULT_ARRAYS] == {"c": [[1.0]]}
    logged = round_metrics({**reported, "training_iteration": 3, "time_total_s": 9.0})
    assert math.isnan(logged.pop("client_val_accuracy"))
    assert logged == {k: v for k, v in metrics.items()
                      if k not in ("round", "client_val_accuracy", RESULT_ARRAYS)}


def test_arrays_every_is_a_typed_validated_config_field():
    assert load_experiment({}).tracking.arrays_every == 5
    assert load_experiment({"tracking": {"arrays_every": 0}}).flat()["tracking.arrays_every"] == 0
    for bad, message in ((-1, "tracking.arrays_every: must be >= 0"), (1.5, "tracking.arrays_every: must be an "
                                                                           "integer")):
        with pytest.raises(ConfigError) as info:
            load_experiment({"tracking": {"arrays_every": bad}})
        assert info.value.field == "tracking.arrays_every" and message in str(info.value)
    with pytest.raises(ConfigError, match="tracking.every: unknown key"):
        load_experiment({"tracking": {"every": 3}})


def test_default_algorithm_reports_no_arrays():
    from algorithms import ALGORITHMS
    from algorithms.base import ServerState

    assert ALGORITHMS["fedavg"]().report_arrays(ServerState(weights=torch.zeros(3))) == {}
