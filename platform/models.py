"""The model zoo, as the platform sees it: re-exported from :mod:`algorithms.models`.

Models are pure PyTorch and algorithms build some themselves (FedED's autoencoders), so the zoo lives under
``algorithms/`` (which never imports ``platform``); the platform builds clients' and servers' models from it.
"""
from algorithms.models import *  # noqa: F401,F403
from algorithms.models import __all__  # noqa: F401
