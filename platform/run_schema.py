"""The run schema, defined once: the MLflow tag keys, parameter prefixes and summary-metric prefixes that
``platform.sweep``, ``platform.run`` and the tracking callback write, and tools that read runs rely on.

Metric names themselves are declared by the algorithms (``algorithms.base.STANDARD_METRICS`` and each method's
``metrics``); the runtime adds timing metrics ending in ``_seconds``.
"""

# Tags
TAG_STATUS = "status"  # one of the STATUS_* values below
TAG_SEARCH_SPACE = "fedsweep.search_space"
TAG_DESCRIPTION = "fedsweep.description"
TAG_COMMAND = "fedsweep.command"  # the command line as the user would retype it
TAG_TRIAL_ID = "fedsweep.trial_id"
TAG_SAMPLED = "fedsweep.sampled"  # "key=value, ..." of a trial's sampled parameters
TAG_GIT_COMMIT = "mlflow.source.git.commit"
TAG_PARENT_RUN = "mlflow.parentRunId"
TAG_BEST_PREFIX = "best."  # on a sweep's parent run: best.<parameter> = value of the best trial

# Values of TAG_STATUS
STATUS_RUNNING = "running"
STATUS_COMPLETED = "completed"
STATUS_EARLY_STOPPED = "early-stopped"
STATUS_FAILED = "failed"
STATUS_INTERRUPTED = "interrupted"

# Parameter prefixes on a sweep's parent run
PARAM_BASE = "base."  # the base experiment config
PARAM_SPACE = "space."  # each swept parameter's distribution
PARAM_SEARCH = "search."  # searcher, scheduler, seeds, ...
PARAM_SEEDS = "search.seeds"  # on each trial run: the seeds it ran

# Summary metric prefixes
METRIC_FINAL = "final_"  # a run's last reported value of each metric
METRIC_BEST = "best_"  # the best value of the selection metric
METRIC_BEST_TRIAL = "best_trial_"  # on a sweep's parent run: the best trial's test figures (selected on validation)
METRIC_ROUNDS_COMPLETED = "rounds_completed"

# Multi-objective sweeps: on the parent run, the Pareto front of the finished trials (last reported values)
METRIC_PARETO_SIZE = "pareto_size"  # number of non-dominated trials
ARTIFACT_PARETO_JSON = "pareto_front.json"  # a JSON list, one object per front trial: trial, run_id, round,
#                                             each objective (and its _std over seeds), params
ARTIFACT_PARETO_CSV = "pareto_front.csv"  # the same table as CSV (params as columns)
ARTIFACT_PARETO_PNG = "pareto_front.png"  # the first two objectives of every finished trial, the front highlighted

# Arrays a method reports (Algorithm.report_arrays, e.g. MNFL's coefficient matrix c), every tracking.arrays_every
# rounds and after the last round: artifacts arrays/<name>/round_<r>.png (heat-map) and arrays/<name>/round_<r>.csv
# (the matrix, one line per row, comma-separated). In a round's metrics (what a trial reports to Tune) they travel
# under RESULT_ARRAYS as {name: nested list of rows}; it is never a metric.
ARTIFACT_ARRAYS = "arrays"
RESULT_ARRAYS = "_arrays"
MAX_ARRAY_ELEMENTS = 1_000_000  # larger arrays are skipped, with one warning per name
