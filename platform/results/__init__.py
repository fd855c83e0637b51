"""What a run leaves for people: MLflow tracking (:mod:`.tracking`), the UI's deep links (:mod:`.mlflow_ui`), a sweep
read back from the store (:mod:`.sweep_results`), the tables and plots made from it (:mod:`.sweep_artifacts`) and its
report (:mod:`.report`; the command is ``python -m platform.report``)."""
