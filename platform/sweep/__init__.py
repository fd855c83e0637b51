"""``python -m platform.sweep <name>``: a search space run as a Ray Tune + Optuna study, tracked in MLflow.

The command line is :mod:`.command`; the study it runs (searcher, scheduler, Tune experiments) and its pieces live
beside it, one module each. Importing this package imports nothing else (``__main__`` runs the command).
"""
