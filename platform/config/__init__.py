"""What a user writes, typed and validated: the experiment config, its schema machinery, the search spaces, the model
zoo's names and the result schema (tags, metrics and artifacts the runs record).

The lowest floor of the platform: it imports nothing of ``platform`` but the errors. Checks that need the data or
the stages (is a dataset there, does a crop pool fit its photo) are :mod:`platform.preflight`'s.
"""
